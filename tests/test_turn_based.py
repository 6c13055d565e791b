"""Turn-based games: PettingZoo AEC envs with legal-move masks, masked policies, both-sided self-play,
and the search players the board-game configs are measured against."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("pettingzoo", reason="needs the pettingzoo extra: pip install -e '.[pettingzoo]'")

from srl.api.agents import DEFAULT_POLICY  # noqa: E402
from srl.api.components import make_env, make_policy  # noqa: E402
from srl.api.config import SelfPlayConfig  # noqa: E402
from srl.api.env import spaces_of  # noqa: E402
from srl.data import keys  # noqa: E402
from srl.data.named_array import NamedArray  # noqa: E402
from srl.envs.slots import EnvSlot  # noqa: E402
from srl.envs.turn_based import PASS, TurnBasedEnv  # noqa: E402
from srl.evaluate import player_from_file  # noqa: E402
from srl.league.match import play_games  # noqa: E402
from srl.league.pool import Pool  # noqa: E402
from srl.models.distributions import ActionHead  # noqa: E402
from srl.workers.env_ring import EnvRing  # noqa: E402
from srl.workers.opponents import SelfPlay  # noqa: E402

PLAYERS = Path(__file__).resolve().parents[1] / "benchmarks" / "board_players.py"

TICTACTOE = "classic/tictactoe-v3"
CONNECT4 = "classic/connect_four-v3"


# ---------------------------------------------------------------------------- the env
def test_only_the_agent_to_move_has_legal_moves_and_the_others_must_pass():
    env = TurnBasedEnv(TICTACTOE)
    assert env.agent_ids == ("player_1", "player_2")
    space = env.observation_space("player_1")
    assert set(space.spaces) == {keys.OBS, keys.ACTION_MASK} and space[keys.ACTION_MASK].shape == (9,)
    steps = env.reset(seed=0)
    assert steps["player_1"].obs[keys.ACTION_MASK].tolist() == [1] * 9
    assert steps["player_2"].obs[keys.ACTION_MASK].tolist() == [1] + [0] * 8  # waiting: PASS only
    steps = env.step({"player_1": np.int64(4), "player_2": np.int64(7)})  # player_2's action is not used
    assert steps["player_1"].obs[keys.ACTION_MASK].tolist() == [1] + [0] * 8
    assert steps["player_2"].obs[keys.ACTION_MASK].tolist() == [1, 1, 1, 1, 0, 1, 1, 1, 1]
    assert steps["player_2"].obs[keys.OBS][1, 1].tolist() == [0, 1]  # the other player's mark, from its side
    with pytest.raises(ValueError, match=r"player_2 chose action 4, which is not legal now \(legal: \[0, 1, 2, 3, 5"):
        env.step({"player_1": np.int64(PASS), "player_2": np.int64(4)})


def test_a_reward_earned_on_the_other_players_move_goes_to_the_agent_it_belongs_to():
    env = TurnBasedEnv(TICTACTOE)
    env.reset(seed=0)
    # player_1: 0, 1, then 8; player_2: 3, 4, 5 completes the middle row on its third move.
    for mover, cell in [("player_1", 0), ("player_2", 3), ("player_1", 1), ("player_2", 4), ("player_1", 8)]:
        steps = env.step({mover: np.int64(cell), ("player_2" if mover == "player_1" else "player_1"): np.int64(PASS)})
        assert all(s.reward == 0.0 and not s.done for s in steps.values())
    steps = env.step({"player_1": np.int64(PASS), "player_2": np.int64(5)})
    assert steps["player_2"].reward == 1.0 and steps["player_1"].reward == -1.0  # player_1 lost on a waiting row
    assert all(s.terminated for s in steps.values())
    assert steps["player_1"].info == {"winner": "player_2", "episode_return": -1.0, "episode_length": 6}


def test_a_drawn_game_has_no_winner():
    env = TurnBasedEnv(TICTACTOE, score_agent="player_2")
    env.reset(seed=0)
    moves = [0, 1, 2, 4, 3, 5, 7, 6, 8]  # x o x / x o o / o x x: nobody has three
    for i, cell in enumerate(moves):
        mover = env.agent_ids[i % 2]
        steps = env.step({mover: np.int64(cell), env.agent_ids[1 - i % 2]: np.int64(PASS)})
    assert steps["player_1"].info == {"winner": None, "episode_return": 0.0, "episode_length": 9}


def test_bad_turn_based_configs_name_the_problem():
    with pytest.raises(ValueError, match="needs env.id"):
        TurnBasedEnv()
    assert TurnBasedEnv("pettingzoo.classic.connect_four_v3").agent_ids == ("player_0", "player_1")  # a module path
    with pytest.raises(ValueError, match="not a PettingZoo AEC env"):
        TurnBasedEnv("srl.envs.duel:DuelEnv")
    with pytest.raises(ValueError, match="score_agent 'player_9' is not one of its agents"):
        TurnBasedEnv(TICTACTOE, score_agent="player_9")


# ---------------------------------------------------------------------------- masked policies
@pytest.mark.parametrize("game", [TICTACTOE, CONNECT4])
@pytest.mark.parametrize("policy", [
    {"type": "actor_critic"},                                      # acts in NumPy
    {"type": "actor_critic", "args": {"lstm": 8}},                 # acts in torch
    {"type": "actor_critic", "args": {"encoder": "board_cnn", "share_encoder": True}},
    {"type": "q_network", "args": {"epsilon_start": 0.5, "epsilon_end": 0.5}},
    {"type": "q_network", "args": {"lstm": 8, "epsilon_start": 0.0, "epsilon_end": 0.0}},
    {"type": "random"},
    {"type": "muzero", "args": {"state": 16, "hidden": [16], "simulations": 4, "two_player": True}},
    {"type": "muzero", "args": {"state": 16, "hidden": [16], "simulations": 4, "two_player": True, "gumbel": True}},
])
def test_no_policy_ever_takes_an_illegal_move_over_thousands_of_turns(game, policy):
    torch.manual_seed(0)
    envs = [make_env({"type": "turn_based", "id": game}) for _ in range(8)]
    slot = EnvSlot(envs, list(range(8)))
    acting = make_policy(policy, *slot.spaces)
    ring = EnvRing([slot], trajectory_length=16, initial_state=acting.initial_state)
    request = ring.start(0)[DEFAULT_POLICY]
    checked = 0
    while ring.env_steps < 2_000:  # an illegal move would raise in the env's step
        reply = acting.rollout(request[keys.OBS], request[keys.RNN_STATE] if keys.RNN_STATE in request else NamedArray())
        mask = request[keys.OBS][keys.ACTION_MASK]
        assert mask[np.arange(len(mask)), reply[keys.ACTION]].all()
        checked += len(mask)
        requests, _ = ring.step(0, {DEFAULT_POLICY: reply})
        request = requests[DEFAULT_POLICY]
    assert checked >= 4_000 and len(ring.pop_episodes()[0]) > 50


def test_hanabi_a_cooperative_card_game_plays_with_masked_moves():
    pytest.importorskip("pyspiel", reason="needs the hanabi extra: pip install -e '.[hanabi]'")
    envs = [make_env({"type": "turn_based", "id": "classic/hanabi-v5"}) for _ in range(4)]
    slot = EnvSlot(envs, list(range(4)))
    acting = make_policy({"type": "actor_critic", "args": {"hidden": [32]}}, *slot.spaces)
    ring = EnvRing([slot], trajectory_length=16)
    request = ring.start(0)[DEFAULT_POLICY]
    while ring.env_steps < 1_000:
        reply = acting.rollout(request[keys.OBS], NamedArray())
        mask = request[keys.OBS][keys.ACTION_MASK]
        assert mask[np.arange(len(mask)), reply[keys.ACTION]].all()
        requests, _ = ring.step(0, {DEFAULT_POLICY: reply})
        request = requests[DEFAULT_POLICY]
    assert len(ring.pop_episodes()[0]) > 10


def test_a_waiting_row_has_log_probability_zero_and_gives_the_policy_no_gradient():
    env = TurnBasedEnv(CONNECT4)
    policy = make_policy({"type": "actor_critic", "args": {"hidden": [16]}}, *spaces_of(env))
    steps = env.reset(seed=0)
    obs = {k: torch.as_tensor(np.stack([steps[a].obs[k] for a in env.agent_ids])) for k in steps["player_0"].obs}
    analysis = policy.analyze({keys.OBS: obs, keys.ACTION: torch.tensor([3, PASS])})
    assert analysis.logprob[1].item() == 0.0 and analysis.logprob[0].item() < -1.0
    analysis.logprob[1].backward(retain_graph=True)
    assert all(p.grad is None or not p.grad.any() for p in policy.net.actor.parameters())
    (analysis.entropy.sum() + analysis.logprob[0]).backward()  # a masked entropy's gradient stays finite
    assert all(torch.isfinite(p.grad).all() for p in policy.parameters() if p.grad is not None)


def test_masked_sampling_never_draws_an_illegal_action_in_torch_or_numpy():
    import gymnasium as gym

    head = ActionHead(4, gym.spaces.Discrete(6))
    features = torch.randn(5000, 4) * 10
    mask = torch.zeros(5000, 6, dtype=torch.int8)
    mask[:, 2] = 1
    mask[::2, 5] = 1
    drawn = head.sample(head(features, mask), deterministic=False)
    assert mask[torch.arange(5000), drawn].all() and set(drawn[::2].tolist()) == {2, 5}
    out = head.linear(features).detach().numpy()
    action, logprob = head.sample_numpy(out, None, np.random.default_rng(0), False, mask.numpy())
    assert mask.numpy()[np.arange(5000), action].all() and (logprob[1::2] == 0).all()


def test_the_board_cnn_reads_the_planes_wherever_a_pattern_stands_and_the_mask_beside_them():
    from srl.models.cnn import BoardCNN

    space = TurnBasedEnv(CONNECT4).observation_space("player_0")
    encoder = BoardCNN(space.spaces)
    assert encoder.out_dim == BoardCNN.CHANNELS * 6 * 7 + 7
    board = torch.zeros(2, 6, 7, 2, dtype=torch.int8)
    for bias in (m.bias for m in encoder.convs if isinstance(m, torch.nn.Conv2d)):
        torch.nn.init.normal_(bias)  # (as after training: an empty cell's features differ from the padding's)
    board[0, 3:6, 2, 0] = 1
    board[1, 3:6, 4, 0] = 1  # the same three, two columns to the right
    features = encoder({keys.OBS: board, keys.ACTION_MASK: torch.ones(2, 7, dtype=torch.int8)})
    assert features.shape == (2, encoder.out_dim)
    maps = features[:, :-7].reshape(2, BoardCNN.CHANNELS, 6, 7)
    # Convolutions: the same response two columns on (each column's field of view, two columns
    # either side, lies inside the board).
    assert torch.allclose(maps[0, :, :, 2], maps[1, :, :, 4], atol=1e-5)
    assert not torch.allclose(maps[0, :, :, 2], maps[1, :, :, 2], atol=1e-3)
    with pytest.raises(ValueError, match="board_cnn reads one"):
        BoardCNN({keys.OBS: space[keys.ACTION_MASK]})


def test_a_deeper_board_cnn_sees_the_far_end_of_a_line_from_the_cell_that_completes_it():
    from srl.models.actor_critic import ActorCriticConfig, ActorCriticNet
    from srl.models.cnn import BoardCNN

    env = TurnBasedEnv(CONNECT4)
    space = env.observation_space("player_0")
    for layers, sees in ((2, False), (3, True)):
        encoder = BoardCNN(space.spaces, channels=8, layers=layers)
        for bias in (m.bias for m in encoder.convs if isinstance(m, torch.nn.Conv2d)):
            torch.nn.init.normal_(bias)
        board = torch.zeros(2, 6, 7, 2, dtype=torch.int8)
        board[0, 5, 0, 0] = 1  # a piece three columns left of the bottom row's cell 3
        features = encoder({keys.OBS: board, keys.ACTION_MASK: torch.ones(2, 7, dtype=torch.int8)})
        at_cell = features[:, :-7].reshape(2, 8, 6, 7)[:, :, 5, 3]
        assert (not torch.allclose(at_cell[0], at_cell[1], atol=1e-6)) == sees, layers
    net = ActorCriticNet(space, env.action_space("player_0"),
                         ActorCriticConfig(encoder="board_cnn", share_encoder=True, board_layers=4, board_channels=8))
    convs = [m for m in net.actor_encoder.convs if isinstance(m, torch.nn.Conv2d)]
    assert len(convs) == 4 and {m.out_channels for m in convs} == {8}


def test_a_mask_that_does_not_fit_the_actions_is_refused():
    import gymnasium as gym

    space = gym.spaces.Dict({keys.OBS: gym.spaces.Box(0, 1, (3,)), keys.ACTION_MASK: gym.spaces.Box(0, 1, (4,), np.int8)})
    with pytest.raises(ValueError, match=r"'action_mask': shape \(4,\), expected \(5,\)"):
        make_policy({"type": "actor_critic"}, space, gym.spaces.Discrete(5))
    with pytest.raises(ValueError, match="legal-action masks need discrete actions"):
        make_policy({"type": "actor_critic"}, space, gym.spaces.Box(-1, 1, (4,)))


# ---------------------------------------------------------------------------- self-play on both sides
def test_swap_sides_seats_the_learner_first_in_even_envs_and_second_in_odd_ones(tmp_path):
    slot = EnvSlot([TurnBasedEnv(CONNECT4) for _ in range(4)], list(range(4)))
    settings = SelfPlayConfig(learner=["player_0"], swap_sides=True)
    self_play = SelfPlay(settings, [slot], Pool(tmp_path / "pool"), lambda: None, np.random.default_rng(0))
    assert self_play.learner_rows.tolist() == [0, 3, 4, 7] and self_play.opponent_rows.tolist() == [1, 2, 5, 6]
    odd = EnvSlot([TurnBasedEnv(CONNECT4) for _ in range(3)], list(range(3)))
    with pytest.raises(ValueError, match="needs an even number of envs, not 3"):
        SelfPlay(settings, [odd], Pool(tmp_path / "pool2"), lambda: None, np.random.default_rng(0))


# ---------------------------------------------------------------------------- the search players
def test_the_perfect_tictactoe_player_never_loses_and_beats_random_play():
    envs = [TurnBasedEnv(TICTACTOE) for _ in range(8)]
    spaces = spaces_of(envs[0])
    perfect, label = player_from_file(f"{PLAYERS}:tictactoe_perfect", spaces)  # as `srl evaluate` seats it
    assert label == "board_players.py:tictactoe_perfect"
    rnd = make_policy({"type": "random", "args": {"seed": 0}}, *spaces)
    for seats in ((["player_1"], ["player_2"]), (["player_2"], ["player_1"])):
        games = play_games(envs, seats, perfect, rnd, 100, seed=0)
        assert games.losses == 0 and games.wins >= 75
    assert play_games(envs, (["player_1"], ["player_2"]), perfect, perfect, 40, seed=0).draws == 40


def test_a_player_file_that_does_not_hold_the_player_is_one_clear_error(tmp_path):
    spaces = spaces_of(TurnBasedEnv(TICTACTOE))
    with pytest.raises(ValueError, match="has no player 'nobody'"):
        player_from_file(f"{PLAYERS}:nobody", spaces)
    with pytest.raises(ValueError, match="does not exist"):
        player_from_file(f"{tmp_path}/missing.py:x", spaces)
    (tmp_path / "not_a_policy.py").write_text("def build(obs_space, action_space):\n    return 3\n")
    with pytest.raises(ValueError, match="built a int, not an srl.api.Policy"):
        player_from_file(f"{tmp_path}/not_a_policy.py:build", spaces)


def test_srl_evaluate_seats_a_search_player_and_counts_wins_draws_and_losses(tmp_path, capsys):
    from srl.cli import main

    (tmp_path / "config.yaml").write_text("name: ttt\nseed: 1\nenv: {type: turn_based, id: classic/tictactoe-v3}\n"
                                          "policy: {type: actor_critic}\nstop: {env_steps: 1000}\n")
    (tmp_path / "checkpoints").mkdir()
    json_path = tmp_path / "result.json"
    assert main(["evaluate", str(tmp_path), "random", "--episodes", "60", "--envs", "6", "--agents",
                 f"player_2={PLAYERS}:tictactoe_perfect", "--json", str(json_path)]) == 0
    out = capsys.readouterr().out
    assert "player_2=board_players.py:tictactoe_perfect" in out and "won: " in out
    outcomes = json.loads(json_path.read_text())["outcomes"]
    assert sum(outcomes.values()) == 60 and outcomes.get("player_1", 0) == 0  # the perfect player never loses
    assert outcomes["player_2"] > 30


def test_the_connect4_search_player_takes_a_win_and_blocks_one():
    env = TurnBasedEnv(CONNECT4)
    player = player_from_file(f"{PLAYERS}:connect4_depth2", spaces_of(env))[0]
    board = np.zeros((6, 7, 2), np.int8)
    board[5, 0:3, 0] = 1  # its own three on the bottom row: column 3 wins
    board[5, 4:6, 1] = 1
    board[4, 4, 1] = 1
    mask = np.ones((1, 7), np.int8)
    act = lambda b: int(player.rollout(NamedArray({keys.OBS: b[None], keys.ACTION_MASK: mask}), NamedArray())[keys.ACTION][0])  # noqa: E731
    assert act(board) == 3
    board = board[..., ::-1].copy()  # the other player's three now: column 3 blocks it
    assert act(board) == 3


def test_board_tactics_finds_positions_a_search_player_answers_and_random_play_mostly_does_not(tmp_path, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("board_tactics", PLAYERS.parent / "board_tactics.py")
    tactics = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tactics)
    env = TurnBasedEnv(CONNECT4)
    found = tactics.tactical_positions(env, 40, seed=0)
    for kind, positions in found.items():
        assert len(positions) == 40
        for obs, answers in positions:
            board = obs[keys.OBS]
            # A "win" column completes four for the mover; a "block" column for the other player.
            assert answers == tactics.winning_columns(board if kind == "win" else board[..., ::-1]) and answers
    (tmp_path / "config.yaml").write_text("name: c4\nseed: 1\nenv: {type: turn_based, id: classic/connect_four-v3}\n"
                                          "policy: {type: actor_critic}\nstop: {env_steps: 1000}\n")
    assert tactics.main([str(tmp_path), "--source", f"{PLAYERS}:connect4_depth2", "--positions", "40"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| a win") or "threatens" in line]
    searched = [float(row.split("|")[2].strip(" %")) for row in rows]
    chance = [float(row.split("|")[3].strip(" %")) for row in rows]
    assert searched[0] == 100.0 and searched[1] >= 90 and max(chance) < 40
    # In its own games: the search player against random play meets wins in one, and takes each.
    assert tactics.main([str(tmp_path), "--source", f"{PLAYERS}:connect4_depth2", "--against", "random",
                         "--games", "20"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| a win") or "threatens" in line]
    met = [int(row.split("|")[2]) for row in rows]
    answered = [float(row.split("|")[3].strip(" %")) for row in rows]
    assert met[0] >= 10 and answered[0] == 100.0 and met[1] >= 5 and answered[1] >= 90, rows
