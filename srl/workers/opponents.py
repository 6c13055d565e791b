"""Self-play in an actor: the opponents' agents act with a frozen version from the pool,
and only the learner's agents make samples.

The actor wraps its inference client and filters its trajectories; nothing else changes:

    self_play = SelfPlay.open(settings, slots, run_dir, make_policy)
    inference = self_play.wrap(inference)          # learner rows: the policy; opponent rows: the frozen one
    ...
    samples.put(self_play.samples_of(trajectory))  # the learner's rows only; counts finished episodes

Rows are (env, agent) pairs, env-major: the same agents sit at the same offsets in every env,
so the learner's rows and the opponents' are fixed index sets. One opponent plays every env
of the actor at a time; after the actor's envs have finished `opponent_episodes` episodes
each (on average), the next is drawn from the pool with the configured strategy (`latest`,
`uniform`, `pfsp`; `srl.league.selection`). A draw takes effect at the next step, so an
episode under way when it happens finishes against the new opponent. Until the pool holds a
version (the league worker adds the first one as the run starts), the policy being trained
plays the opponents' agents too. With `opponent_random_moves`, a share of the opponents' moves
is drawn at random among their legal ones.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from srl.api.config import SelfPlayConfig
from srl.api.policy import Policy, mask_of, with_random_moves
from srl.api.run_paths import RunPaths
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.envs.slots import Slot
from srl.league import selection
from srl.league.match import split_agents
from srl.league.pool import Entry, Pool
from srl.learn import checkpoint
from srl.streams.inference import InferenceClient
from srl.workers.base import FatalError

log = logging.getLogger(__name__)

#: Frozen versions an actor keeps loaded (a draw among them loads nothing).
CACHED_OPPONENTS = 8
#: Seconds between looks at the pool while it is empty.
EMPTY_POOL_RETRY_S = 1.0


class SelfPlay:
    """Which rows learn, which opponent plays the others, and when to draw the next one."""

    def __init__(self, settings: SelfPlayConfig, slots: Sequence[Slot], pool: Pool,
                 make_policy: Callable[[], Policy], rng: np.random.Generator) -> None:
        self.settings = settings
        slot = slots[0]  # every slot of an actor has the same rows
        if not hasattr(slot, "agents"):
            raise ValueError("self_play: needs a multi-agent env stepped by the python backend (env.backend: python)")
        agents = list(slot.agents)
        mine, _ = split_agents(agents, settings.learner)
        n = len(agents)
        if settings.swap_sides and slot.n_envs % 2:
            raise ValueError(f"self_play.swap_sides: the learner sits on either side in every other env of a "
                             f"slot, so a slot needs an even number of envs, not {slot.n_envs} (actors.envs_per_slot)")

        def learns(row: int) -> bool:  # with swap_sides, in odd envs the learner has the other seats
            return (agents[row % n] in mine) != (settings.swap_sides and (row // n) % 2 == 1)

        self.learner_rows = np.array([r for r in range(slot.rows) if learns(r)])
        self.opponent_rows = np.array([r for r in range(slot.rows) if not learns(r)])
        #: Per env, the learner's agents on average (an episode ends once per env, on each of its agents).
        self.learner_per_env = len(self.learner_rows) / slot.n_envs
        #: The actor's envs, over all its slots (a draw is due after `opponent_episodes` episodes each).
        self.envs = sum(s.n_envs for s in slots)
        self.pool, self.make_policy, self.rng = pool, make_policy, rng
        self.loaded: OrderedDict[int, Policy] = OrderedDict()
        self.opponent: Entry | None = None
        self.policy: Policy | None = None
        self.episodes = 0.0
        self.draws = 0
        self.last_try = -np.inf
        action_space = slot.spaces[1]
        #: Actions the opponents may take at random (`opponent_random_moves`; masks narrow them per row).
        self.random_actions = action_space.n if isinstance(action_space, gym.spaces.Discrete) else None
        if settings.opponent_random_moves > 0 and self.random_actions is None:
            raise ValueError(f"self_play.opponent_random_moves: random moves are drawn among discrete actions, "
                             f"and this env's action space is {action_space}")

    @classmethod
    def open(cls, settings: SelfPlayConfig, slots: Sequence[Slot], run_dir: str | Path,
             make_policy: Callable[[], Policy]) -> SelfPlay:
        """An actor's self-play on the run's pool; its draws follow the process's seeded generator."""
        try:
            return cls(settings, slots, Pool(RunPaths(run_dir).pool), make_policy,
                       np.random.default_rng(np.random.randint(2**31)))
        except ValueError as exc:  # the learner's patterns do not fit the env: a restart cannot help
            raise FatalError(str(exc)) from exc

    def wrap(self, inference: InferenceClient) -> InferenceClient:
        return OpponentInference(inference, self)

    # ------------------------------------------------------------------ the opponent
    def current(self) -> Policy | None:
        """The frozen policy that plays the opponents' rows now (None: the pool is still empty)."""
        if self.policy is None and time.monotonic() - self.last_try > EMPTY_POOL_RETRY_S:
            self.draw()
        return self.policy

    def draw(self) -> None:
        """The next opponent, drawn from the pool (kept as is if the pool cannot give one)."""
        self.last_try = time.monotonic()
        s = self.settings
        entries = self.pool.entries(recent=s.win_rate_matches)
        while entries:
            entry = selection.choose(s.opponent, entries, self.rng, s.pfsp_weighting, s.pfsp_exponent)
            try:
                self.policy = self._load(entry)
            except (OSError, checkpoint.CheckpointError) as exc:  # pruned as we drew it
                log.info("pool version %d is gone (%s); drawing another", entry.version, exc)
                entries = [e for e in entries if e.id != entry.id]
                continue
            self.opponent = entry
            self.draws += 1
            return

    def _load(self, entry: Entry) -> Policy:
        if entry.id in self.loaded:
            self.loaded.move_to_end(entry.id)
            return self.loaded[entry.id]
        if not checkpoint.is_valid(entry.path):
            raise OSError(f"{entry.path.name} is missing or incomplete")
        policy = self.make_policy()
        policy.load_state_dict(checkpoint.load(entry.path)["policy"])
        self.loaded[entry.id] = policy
        while len(self.loaded) > CACHED_OPPONENTS:
            self.loaded.popitem(last=False)
        return policy

    # ------------------------------------------------------------------ samples
    def with_random_moves(self, obs: NamedArray, actions: np.ndarray) -> np.ndarray:
        """`actions` of the opponents' rows, each replaced, at the rate `opponent_random_moves`, by
        one of its row's legal actions (its action mask) drawn uniformly."""
        return with_random_moves(actions, mask_of(obs), self.random_actions, self.settings.opponent_random_moves,
                                 self.rng)

    def samples_of(self, trajectory: NamedArray) -> NamedArray:
        """The learner's rows of a trajectory [T + 1, rows, ...]; counts its finished episodes and
        draws the next opponent when they are due."""
        learner = trajectory[:, self.learner_rows]
        ended = (learner[keys.TERMINATED][:-1] | learner[keys.TRUNCATED][:-1]) & learner[keys.ALIVE][:-1]
        self.episodes += float(ended.sum()) / self.learner_per_env
        if self.policy is not None and self.episodes >= self.settings.opponent_episodes * self.envs:
            self.episodes = 0.0
            self.draw()
        return learner

    def stats(self) -> dict[str, Any]:
        return {"opponent_version": None if self.opponent is None else self.opponent.version,
                "opponent_draws": self.draws}

    def close(self) -> None:
        self.pool.close()


class OpponentInference(InferenceClient):
    """An inference client that asks `inner` for the learner's rows only and acts for the
    opponents' rows itself, with the frozen opponent; replies hold every row, as the ring expects."""

    def __init__(self, inner: InferenceClient, self_play: SelfPlay) -> None:
        self.inner, self.self_play = inner, self_play
        self.round_trip = inner.round_trip
        #: Per slot waiting for its reply: the opponents' reply (None: the inner client acts for every row).
        self.opponent_reply: dict[int, NamedArray | None] = {}

    def request(self, slot: int, request: NamedArray) -> None:
        opponent = self.self_play.current()
        if opponent is None:
            self.opponent_reply[slot] = None
            self.inner.request(slot, request)
            return
        sp = self.self_play
        theirs = request[sp.opponent_rows]
        state = theirs[keys.RNN_STATE] if keys.RNN_STATE in theirs else NamedArray()
        reply = opponent.rollout(theirs[keys.OBS], state)
        reply[keys.ACTION] = sp.with_random_moves(theirs[keys.OBS], np.asarray(reply[keys.ACTION]))
        self.opponent_reply[slot] = reply
        self.inner.request(slot, request[sp.learner_rows])

    def reply(self, timeout_ms: int) -> tuple[int, NamedArray] | None:
        got = self.inner.reply(timeout_ms)
        if got is None:
            return None
        slot, reply = got
        theirs = self.opponent_reply.pop(slot, None)
        if theirs is None:
            return slot, reply
        sp = self.self_play
        rows = len(sp.learner_rows) + len(sp.opponent_rows)
        full = NamedArray()
        for path, leaf in reply.items_flat():
            column = np.zeros((rows, *leaf.shape[1:]), leaf.dtype)
            column[sp.learner_rows] = leaf
            if path == keys.ACTION or path.startswith(f"{keys.RNN_STATE}/"):
                column[sp.opponent_rows] = theirs[path]
            elif path == keys.VERSION:  # never trained on: the learner's version keeps staleness checks quiet
                column[sp.opponent_rows] = leaf.max(initial=0)
            full[path] = column
        return slot, full

    def close(self) -> None:
        self.inner.close()
