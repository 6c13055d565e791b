"""Self-play: the pool store, opponent selection, ratings, games with winners, the duel env,
the actors' opponents, the league worker's work, the graph and config, and a real run."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import numpy as np
import pytest
from conftest import metrics_lines, run_workers, start_one, step_one, train_inline

from srl.api.components import make_policy
from srl.api.config import ConfigError, EnvConfig, SelfPlayConfig, validate
from srl.api.env import AgentStep
from srl.api.policy import Analysis, Policy
from srl.api.run_paths import RunPaths
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.envs.duel import DuelEnv
from srl.envs.fake import FakeEnv
from srl.envs.slots import EnvSlot
from srl.league import selection
from srl.league.match import outcome, play_games, split_agents
from srl.league.pool import Entry, Pool
from srl.league.rating import Rating, Ratings
from srl.learn import checkpoint
from srl.prepare import resolve_graph as resolve
from srl.streams.inference import InlineInference
from srl.workers.league import INITIAL, League
from srl.workers.opponents import SelfPlay

SELF_PLAY = SelfPlayConfig(learner=["player_0"], opponent="uniform", pfsp_weighting="hard", pfsp_exponent=2.0,
                           win_rate_matches=5, opponent_episodes=1.0, snapshot_every_versions=2, pool_size=3,
                           every_s=0.01, opponents_per_round=3, episodes=8, envs=4, deterministic=False)


# ---------------------------------------------------------------------------- the pool store
def test_pool_keeps_versions_with_tags_metadata_and_results(tmp_path):
    pool = Pool(tmp_path / "pool.sqlite")
    a = pool.add(0, 0, "v0.pt", tags=["initial", "snapshot"], metadata={"rating": {"mu": 25.0, "sigma": 8.3}})
    b = pool.add(10, 5000, "v10.pt", tags=["snapshot"])
    assert [e.version for e in pool.entries()] == [0, 10] and len(pool) == 2
    assert a.path == tmp_path / "v0.pt" and a.tags == ("initial", "snapshot")
    assert [e.id for e in pool.entries(tag="initial")] == [a.id]
    pool.tag(b.id, "best")
    pool.untag(a.id, "snapshot")
    assert pool.get(b.id).tags == ("best", "snapshot") and pool.get(a.id).tags == ("initial",)
    merged = pool.update_metadata(a.id, {"eval_return": 1.5})
    assert merged == {"rating": {"mu": 25.0, "sigma": 8.3}, "eval_return": 1.5}
    with pytest.raises(KeyError, match="no version with id 99"):
        pool.update_metadata(99, {})
    for wins, draws, losses in ((1, 0, 3), (2, 2, 0), (4, 0, 0)):
        pool.record_match(12, b.id, wins, draws, losses)
    got = pool.get(b.id)
    assert (got.wins, got.draws, got.losses, got.games) == (7, 2, 3, 12)
    recent = {e.id: e for e in pool.entries(recent=2)}[b.id]  # the two newest matches only
    assert (recent.wins, recent.draws, recent.losses) == (6, 2, 0)
    assert recent.win_rate == pytest.approx((6 + 1 + 1) / (8 + 2))
    assert pool.get(a.id).win_rate == 0.5  # no games: the prior
    assert pool.latest().id == b.id
    pool.set_state("player_rating", {"mu": 30.0})
    assert Pool(tmp_path / "pool.sqlite").state("player_rating") == {"mu": 30.0}  # another connection sees it
    assert pool.state("missing", 7) == 7
    pool.remove(b.id)
    assert [e.id for e in pool.entries()] == [a.id]
    assert not Pool(tmp_path / "pool.sqlite")._db.execute("SELECT * FROM matches").fetchall()  # went with it


def test_prune_drops_the_oldest_but_never_the_protected(tmp_path):
    pool = Pool(tmp_path / "pool.sqlite")
    for v in range(5):
        pool.add(v, 0, f"v{v}.pt", tags=["initial"] if v == 0 else [])
    removed = pool.prune(3)
    assert [e.version for e in removed] == [1, 2]
    assert [e.version for e in pool.entries()] == [0, 3, 4]


def _writer(path: str, worker: int, n: int) -> None:
    pool = Pool(path, timeout_s=60)
    shared = pool.entries(tag="shared")[0].id
    for i in range(n):
        entry = pool.add(1000 * worker + i, i, f"w{worker}-{i}.pt", tags=[f"w{worker}"])
        pool.record_match(entry.version, shared, wins=1, draws=0, losses=0)
        pool.update_metadata(shared, {f"w{worker}-{i}": i})  # read-modify-write of one row by everyone


def test_concurrent_writers_lose_nothing(tmp_path):
    path = tmp_path / "pool.sqlite"
    Pool(path).add(0, 0, "shared.pt", tags=["shared"])
    workers, n = 4, 25
    context = multiprocessing.get_context("fork")
    processes = [context.Process(target=_writer, args=(str(path), w, n)) for w in range(workers)]
    for p in processes:
        p.start()
    for p in processes:
        p.join(120)
    assert [p.exitcode for p in processes] == [0] * workers
    pool = Pool(path)
    assert len(pool) == 1 + workers * n
    shared = pool.entries(tag="shared")[0]
    assert shared.wins == workers * n
    assert len(shared.metadata) == workers * n  # no update overwrote another's
    assert all(len(pool.entries(tag=f"w{w}")) == n for w in range(workers))


# ---------------------------------------------------------------------------- opponent selection
def _entry(i: int, version: int, wins: int = 0, losses: int = 0) -> Entry:
    return Entry(i, version, 0, Path(f"v{version}.pt"), 0.0, wins=wins, losses=losses)


def test_latest_and_uniform():
    entries = [_entry(1, 0), _entry(2, 30), _entry(3, 20)]
    assert list(selection.probabilities("latest", entries)) == [0.0, 1.0, 0.0]
    assert np.allclose(selection.probabilities("uniform", entries), 1 / 3)
    with pytest.raises(ValueError, match="empty"):
        selection.probabilities("uniform", [])


def test_pfsp_prefers_the_opponents_the_learner_loses_to():
    beaten, even, unbeaten = _entry(1, 0, wins=18, losses=2), _entry(2, 10, wins=5, losses=5), _entry(3, 20, losses=9)
    p = selection.probabilities("pfsp", [beaten, even, unbeaten])
    assert p[2] > p[1] > p[0] and p.sum() == pytest.approx(1.0)
    assert np.allclose(p, selection.pfsp_weights([e.win_rate for e in (beaten, even, unbeaten)]))
    # variance: the opponents at the learner's level
    v = selection.pfsp_weights([0.9, 0.5, 0.1], weighting="variance")
    assert v[1] > v[0] and v[0] == pytest.approx(v[2])
    assert np.allclose(selection.pfsp_weights([1.0, 1.0]), 0.5)  # nothing to prefer: uniform
    rng = np.random.default_rng(0)
    drawn = [selection.choose("pfsp", [beaten, even, unbeaten], rng).id for _ in range(2000)]
    counts = np.bincount(drawn, minlength=4)[1:]
    assert counts[2] > counts[1] > counts[0]


# ---------------------------------------------------------------------------- ratings
def test_rating_moves_with_results_and_climbs_a_frozen_ladder():
    ratings = Ratings()
    me, them = ratings.initial(), Rating(25.0, 3.0)
    won, lost, drew = (ratings.update(me, them, s) for s in (1.0, 0.0, 0.5))
    assert won.mu > me.mu > lost.mu
    assert drew.mu == pytest.approx(me.mu, abs=0.5)
    assert won.sigma < me.sigma
    strong = Rating(40.0, 2.0)
    assert ratings.win_probability(me, strong) < 0.5
    for _ in range(60):
        me = ratings.update(me, strong, 1.0)
    assert me.mu > 40.0 and ratings.conservative(me) == pytest.approx(me.mu - 3 * me.sigma)
    with pytest.raises(ValueError, match="0.5"):
        ratings.update(me, strong, 0.7)


# ---------------------------------------------------------------------------- games with winners
def test_split_agents_and_outcome():
    assert split_agents(["red_0", "red_1", "blue_0"], ["red_*"]) == (["red_0", "red_1"], ["blue_0"])
    with pytest.raises(ValueError, match="self_play.learner.*none"):
        split_agents(["a", "b"], ["c"])
    with pytest.raises(ValueError, match="all"):
        split_agents(["a", "b"], ["*"])
    obs = {keys.OBS: np.zeros(1)}
    info = lambda w: {"a": AgentStep(obs, info={"winner": w}), "b": AgentStep(obs, info={"winner": w})}  # noqa: E731
    assert outcome(info("a"), {"a": -5.0, "b": 5.0}, ["a"]) == 1.0  # the env's word beats the returns
    assert outcome(info("b"), {"a": 0.0, "b": 0.0}, ["a"]) == 0.0
    assert outcome(info(None), {"a": 1.0, "b": 0.0}, ["a"]) == 0.5
    assert outcome(info(["a", "c"]), {}, ["a"]) == 1.0
    plain = {"a": AgentStep(obs), "b": AgentStep(obs)}
    assert [outcome(plain, {"a": x, "b": 1.0}, ["a"]) for x in (2.0, 1.0, 0.0)] == [1.0, 0.5, 0.0]


class AimPolicy(Policy):
    """A scripted duel player: on a line with the other, shoot at it; else step towards its row."""

    def __init__(self, observation_space=None, action_space=None) -> None:
        pass

    def initial_state(self, batch):
        return NamedArray()

    def rollout(self, obs, state, deterministic=False):
        o = obs[keys.OBS]
        dx, dy = o[:, 2], o[:, 3]
        action = np.where(dx > 0, 4, 3)  # move right / left
        action = np.where(o[:, 5] == 1, np.where(dx > 0, 8, 7), action)  # same row: shoot right / left
        action = np.where(o[:, 4] == 1, np.where(dy > 0, 5, 6), action)  # same column: shoot up / down
        n = len(action)
        return NamedArray({keys.ACTION: action.astype(np.int64), keys.LOGPROB: np.zeros(n, np.float32),
                           keys.VALUE: np.zeros(n, np.float32)})

    def analyze(self, batch, entropy=True):
        return Analysis(None, None, None)

    def get_params(self):
        return NamedArray()

    def set_params(self, params, version):
        self.version = version


def test_play_games_counts_from_the_learners_side():
    envs = [DuelEnv() for _ in range(4)]
    seats = split_agents(envs[0].agent_ids, ["player_0"])
    random = make_policy({"type": "random", "args": {"seed": 0}}, envs[0].observation_space("player_0"),
                         envs[0].action_space("player_0"))
    aim = AimPolicy()
    strong = play_games(envs, seats, aim, random, games=40, seed=1)
    weak = play_games(envs, seats, random, aim, games=40, seed=1)
    assert len(strong.scores) == len(weak.scores) == 40
    assert strong.wins + strong.draws + strong.losses == 40
    assert strong.wins >= 30 and weak.losses >= 30, (strong, weak)


# ---------------------------------------------------------------------------- the duel env
def test_duel_shots_hit_on_the_line_and_the_game_has_a_winner():
    env = DuelEnv(size=5, hp=2, cooldown=1, max_steps=10)
    env.reset(seed=0)
    env.pos = [[0, 2], [4, 2]]  # one row
    steps = env.step({"player_0": 8, "player_1": 0})  # player_0 shoots right
    assert env.hp == [2, 1] and steps["player_0"].reward == 0.5 and steps["player_1"].reward == -0.5
    assert steps["player_0"].obs[keys.OBS][5] == 1.0  # same row
    steps = env.step({"player_0": 8, "player_1": 1})  # cooling down: no shot; player_1 steps off the row
    assert env.hp == [2, 1] and env.pos[1] == [4, 3]
    steps = env.step({"player_0": 1, "player_1": 7})  # player_0 steps onto row 3; player_1 shoots left, hits
    assert env.hp == [1, 1]
    env.pos = [[2, 0], [2, 4]]
    env.cool = [0, 0]
    steps = env.step({"player_0": 5, "player_1": 6})  # both shoot along the column: both out, a draw
    assert steps["player_0"].terminated and steps["player_0"].info["winner"] is None
    assert sum(s.reward for s in steps.values()) == 0.0
    env.reset(seed=1)
    env.pos = [[1, 2], [3, 2]]  # as near the centre (2, 2) as each other
    for _ in range(10):
        steps = env.step({"player_0": 0, "player_1": 0})
    assert steps["player_1"].truncated and steps["player_1"].info["winner"] is None  # time out, even
    env.reset(seed=1)
    env.pos = [[1, 1], [4, 3]]
    for _ in range(10):
        steps = env.step({"player_0": 0, "player_1": 0})
    assert steps["player_1"].info["winner"] == "player_0" and steps["player_0"].reward == 1.0  # nearer the centre
    a, b = DuelEnv(), DuelEnv()
    assert all(np.array_equal(a.reset(seed=3)[k].obs[keys.OBS], b.reset(seed=3)[k].obs[keys.OBS]) for k in a.agent_ids)


def test_duel_reports_player_0s_return():
    env = DuelEnv(size=3, hp=1, max_steps=5)
    env.reset(seed=0)
    env.pos = [[0, 0], [2, 0]]
    steps = env.step({"player_0": 8, "player_1": 0})
    assert steps["player_0"].info == {"winner": "player_0", "episode_return": 2.0, "episode_length": 1}


# ---------------------------------------------------------------------------- the actors' opponents
class ConstantPolicy(Policy):
    """Acts `c` on every row; its weights are `c`, so a pool version plays its own constant."""

    def __init__(self, observation_space=None, action_space=None, c: int = 0) -> None:
        self.c = c

    def initial_state(self, batch):
        return NamedArray()

    def rollout(self, obs, state, deterministic=False):
        n = len(obs[keys.OBS])
        return NamedArray({keys.ACTION: np.full(n, self.c, np.int64), keys.LOGPROB: np.full(n, -1.0, np.float32),
                           keys.VALUE: np.ones(n, np.float32)})

    def analyze(self, batch, entropy=True):
        return Analysis(None, None, None)

    def get_params(self):
        return NamedArray({"c": np.array([self.c])})

    def set_params(self, params, version):
        self.c, self.version = int(params["c"][0]), version


def _freeze(pool: Pool, c: int, version: int) -> Entry:
    name = f"v-{version}"
    checkpoint.save_tagged(pool.path.parent, name, version, {"policy": ConstantPolicy(c=c).state_dict()}, {})
    return pool.add(version, 0, f"{name}.pt")


def test_opponent_rows_act_with_the_pool_version_and_only_learner_rows_are_sampled(tmp_path):
    from srl.workers.env_ring import EnvRing

    envs = [FakeEnv(n_agents=3, n_actions=5, episode_length=4) for _ in range(2)]
    slot = EnvSlot(envs, [0, 1])
    pool = Pool(RunPaths(tmp_path).pool)
    settings = SELF_PLAY.model_copy(update={"learner": ["agent_0", "agent_2"], "opponent": "latest", "opponent_episodes": 1.0})
    self_play = SelfPlay(settings, [slot], pool, lambda: ConstantPolicy(), np.random.default_rng(0))
    learner = ConstantPolicy(c=1)
    learner.version = 7
    inference = self_play.wrap(InlineInference(learner, None))
    ring = EnvRing([slot], trajectory_length=4)
    inference.request(0, start_one(ring, 0))
    _, reply = inference.reply(0)
    assert list(reply[keys.ACTION]) == [1] * 6  # an empty pool: the learner plays every row

    _freeze(pool, c=3, version=0)
    self_play.last_try = -np.inf
    request, _ = step_one(ring, 0, reply)
    inference.request(0, request)
    _, reply = inference.reply(0)
    assert list(reply[keys.ACTION]) == [1, 3, 1, 1, 3, 1]  # rows env-major: agent_1 is the opponent
    assert list(reply[keys.VERSION]) == [7] * 6 and list(reply[keys.LOGPROB]) == [-1, 0, -1, -1, 0, -1]
    assert self_play.stats() == {"opponent_version": 0, "opponent_draws": 1}

    _freeze(pool, c=4, version=10)
    trajectory = None
    while trajectory is None:
        request, trajectory = step_one(ring, 0, reply)
        inference.request(0, request)
        _, reply = inference.reply(0)
    samples = self_play.samples_of(trajectory)
    assert samples[keys.REWARD].shape == (5, 4)  # T + 1 rows of the 4 learner rows, not 6
    assert np.array_equal(samples[keys.OBS][keys.OBS][..., 0], trajectory[keys.OBS][keys.OBS][:, [0, 2, 3, 5], 0])
    # Each env finished one 4-step episode: one episode per env is due, so the newest version is drawn.
    assert self_play.opponent.version == 10 and self_play.draws == 2
    inference.request(0, request)
    assert list(inference.reply(0)[1][keys.ACTION]) == [1, 4, 1, 1, 4, 1]


def test_opponents_random_moves_are_legal_uniform_and_at_the_configured_rate(tmp_path):
    slot = EnvSlot([FakeEnv(n_agents=2, n_actions=7)], [0])
    settings = SELF_PLAY.model_copy(update={"learner": ["agent_0"], "opponent_random_moves": 0.25})
    self_play = SelfPlay(settings, [slot], Pool(RunPaths(tmp_path).pool), ConstantPolicy, np.random.default_rng(0))
    rows = 8000
    mask = np.zeros((rows, 7), np.int8)
    mask[:, [2, 5]] = 1  # two legal moves; the policy's own move, 0, is one the mask forbids
    mask[:10] = 0
    mask[:10, 6] = 1  # a row with one legal move (a player waiting for its turn) gets that one
    policy_moves = np.zeros(rows, np.int64)
    moved = self_play.with_random_moves(NamedArray({keys.OBS: np.zeros((rows, 1)), keys.ACTION_MASK: mask}),
                                        policy_moves)
    assert not policy_moves.any()  # the policy's reply is left as it was
    random = moved != 0
    assert 0.23 < random.mean() < 0.27
    assert set(moved[10:][random[10:]]) == {2, 5} and 0.45 < (moved[random] == 2).mean() < 0.55
    assert set(moved[:10][random[:10]]) <= {6}
    unmasked = self_play.with_random_moves(NamedArray({keys.OBS: np.zeros((rows, 1))}), policy_moves)
    assert set(unmasked) == set(range(7))  # without a mask: any of the action space's moves
    still = SelfPlay(SELF_PLAY.model_copy(update={"learner": ["agent_0"]}), [slot], Pool(RunPaths(tmp_path).pool),
                     ConstantPolicy, np.random.default_rng(0))
    assert still.with_random_moves(NamedArray({keys.OBS: np.zeros((rows, 1))}), policy_moves) is policy_moves


def test_a_pruned_version_is_skipped(tmp_path):
    pool = Pool(RunPaths(tmp_path).pool)
    gone = _freeze(pool, c=2, version=0)
    gone.path.unlink()
    slot = EnvSlot([FakeEnv(n_agents=2)], [0])
    self_play = SelfPlay(SELF_PLAY.model_copy(update={"learner": ["agent_0"]}), [slot], pool, ConstantPolicy,
                         np.random.default_rng(0))
    assert self_play.current() is None
    two_slots = SelfPlay(SELF_PLAY.model_copy(update={"learner": ["agent_0"]}), [slot, EnvSlot([FakeEnv(n_agents=2)] * 3, [0] * 3)],
                         pool, ConstantPolicy, np.random.default_rng(0))
    assert two_slots.envs == 4  # a draw is due after episodes of all the actor's envs
    _freeze(pool, c=4, version=5)
    self_play.draw()
    assert self_play.opponent.version == 5


# ---------------------------------------------------------------------------- the league
def test_league_freezes_versions_and_rates_the_newest_against_them(tmp_path):
    policy = {"type": "actor_critic", "args": {"hidden": [16]}}
    league = League(EnvConfig(type="duel"), policy, SELF_PLAY, tmp_path, seed=0)
    trained = make_policy(policy, DuelEnv().observation_space("player_0"), DuelEnv().action_space("player_0"))
    assert not league.snapshot_due()  # nothing held yet
    for version in range(7):
        league.hold(version, trained.get_params(), env_steps=100 * version)
        if league.snapshot_due():
            league.snapshot()
    pool = Pool(RunPaths(tmp_path).pool)
    assert [e.version for e in pool.entries()] == [0, 4, 6]  # every 2 versions, at most 3 kept (0 protected)
    assert pool.entries(tag=INITIAL)[0].version == 0
    assert not (tmp_path / "league" / "v-000000002.pt").exists()  # pruned with its file
    assert checkpoint.is_valid(pool.entries()[1].path)
    assert league.round_due(0.0)
    metrics = league.play_round(0.0)
    assert metrics["selfplay_games"] == 3 * 8 and sorted(metrics["selfplay_opponents"]) == [0, 4, 6]
    assert 0.0 <= metrics["eval_win_rate"] <= 1.0 and "eval_win_rate_initial" in metrics
    mu, sigma = metrics["selfplay_rating_mu"], metrics["selfplay_rating_sigma"]
    assert metrics["selfplay_rating"] == pytest.approx(mu - 3 * sigma)
    assert metrics["selfplay_rating_sigma"] < Ratings().initial().sigma
    assert all(e.games == 8 for e in pool.entries())
    saved = pool.state("player_rating")
    assert saved["mu"] == metrics["selfplay_rating_mu"] and saved["version"] == 6
    again = League(EnvConfig(type="duel"), policy, SELF_PLAY, tmp_path, seed=0)  # a restarted league goes on
    assert again.rating.mu == metrics["selfplay_rating_mu"] and again.snapshot_version == 6
    league.close()
    again.close()


# ---------------------------------------------------------------------------- config and graph
def _config(**self_play):
    return validate({"name": "t", "env": {"type": "duel"}, "stop": {"env_steps": 1000},
                     "actors": {"inference": "inline"}, "self_play": {"learner": ["player_0"], **self_play}})


def test_self_play_adds_a_league_and_tells_the_actors():
    graph = resolve(_config(opponent="uniform")).graph
    assert graph.groups["league"].kind == "league" and graph.groups["league"].streams == {"parameters": "parameters"}
    assert graph.groups["actor"].settings.self_play.opponent == "uniform"
    assert graph.groups["league"].settings.self_play.learner == ["player_0"]
    plain = resolve(validate({"name": "t", "env": {"type": "duel"}, "stop": {"env_steps": 1000}})).graph
    assert "league" not in plain.groups and plain.groups["actor"].settings.self_play is None


@pytest.mark.parametrize("bad,message", [
    ({"self_play": {}}, "self_play.learner: Field required"),
    ({"self_play": {"learner": []}}, "self_play.learner: List should have at least 1 item"),
    ({"self_play": {"learner": ["a"], "opponent": "best"}}, "self_play.opponent: Input should be"),
    ({"self_play": {"learner": ["a"], "pool_size": 1}}, "self_play.pool_size"),
    ({"self_play": {"learner": ["a"], "opponent_random_moves": 1.5}}, "self_play.opponent_random_moves"),
    ({"self_play": {"learner": ["a"]}, "actors": {"synchronous": True, "count": 1, "inference": "inline"}},
     "actors.synchronous: a self-play run"),
])
def test_bad_self_play_config_is_one_line_naming_the_field(bad, message):
    with pytest.raises(ConfigError) as err:
        validate({"name": "t", "env": {"type": "duel"}, "stop": {"env_steps": 1000}, **bad})
    assert str(err.value).startswith(message), str(err.value)


# ---------------------------------------------------------------------------- a real run
def _actors(run_dir: Path) -> list[dict]:
    return [w for w in run_workers(run_dir).values() if w["group"] == "actor"]


@pytest.mark.integration
def test_self_play_run_fills_the_pool_and_reports_ratings(run_srl, tmp_path):
    run_dir = tmp_path / "run"

    def rated_twice_and_drawn(run: Path) -> bool:  # what the run must show before it is stopped
        return (len([line for line in metrics_lines(run) if "selfplay_rating" in line]) >= 2
                and bool(actors := _actors(run)) and all(w["stats"].get("opponent_draws", 0) > 0 for w in actors)
                and RunPaths(run).pool.exists() and len(Pool(RunPaths(run).pool).entries()) >= 2)

    train_inline(run_dir, "duel-selfplay", "stop.env_steps=null", "self_play.every_s=3",
                 "self_play.snapshot_every_versions=3", "self_play.episodes=8", "self_play.envs=8",
                 "self_play.opponents_per_round=2", "actors.envs_per_slot=16", "trainers.batch_steps=1024",
                 until=rated_twice_and_drawn, what="two rating rounds, two versions and opponents drawn")
    pool = Pool(RunPaths(run_dir).pool)
    entries = pool.entries()
    assert len(entries) >= 2 and entries[0].version == 0 and INITIAL in entries[0].tags
    assert all(checkpoint.is_valid(e.path) and "rating" in e.metadata for e in entries)
    assert sum(e.games for e in entries) > 0
    rated = [line for line in metrics_lines(run_dir) if "selfplay_rating" in line]
    assert len(rated) >= 2, rated
    assert {"selfplay_rating_mu", "selfplay_rating_sigma", "eval_win_rate"} <= rated[-1].keys()
    actors = _actors(run_dir)
    assert actors and all(w["stats"].get("opponent_draws", 0) > 0 for w in actors), actors
    # The pool's versions play as they are: a cross-play of the newest checkpoint against one of them.
    played = run_srl("evaluate", str(run_dir), "--agents", "player_0=latest", f"player_1={entries[0].path}",
                     "--episodes", "4", "--envs", "2", "--json", str(tmp_path / "cross.json"))
    assert played.returncode == 0, played.stderr[-3000:]
    assert json.loads((tmp_path / "cross.json").read_text())["agents"]["player_1"] == entries[0].path.name
