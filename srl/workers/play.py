"""Playing episodes without training: a policy (or several, one per group of agents) on an env slot.

Each player acts for some rows of one policy's group of a slot (`srl.envs.slots`): one
policy for every row, checkpoints of one policy on different agents (cross-play), or several
policies each on its own agents. The short way, for one policy on a few envs of a config's
`env` section (what a worker kind of one's own calls, docs/graph.md):

    slot = env_slot(settings.env, n_envs=2, seed=0)
    policy = make_policy(settings.policy, *slot.spaces)
    result = play_policy(slot, policy, episodes=10)        # greedy: deterministic=True
    result.return_mean, result.length_mean

`srl evaluate` plays a run's checkpoints with it; the evaluation worker plays the newest
version of a training run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from srl.api.components import make_env
from srl.api.config import EnvConfig
from srl.api.policy import Policy
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.envs.gym_slot import GymSlot
from srl.envs.slots import EnvSlot, Episode, SlotStep

if TYPE_CHECKING:
    from srl.envs.render import RecordingEnv

#: The `Evaluation.outcomes` key of drawn episodes.
DRAW = "draw"


@dataclass
class Evaluation:
    episodes: int
    return_mean: float
    return_stderr: float
    length_mean: float
    env_steps: int
    #: agent id -> the source it acted with (a checkpoint by its file name)
    agents: dict[str, str]
    #: Several policies: each one's mean return (its agents' rewards summed over the episode,
    #: averaged over its agents), over the same episodes.
    policy_returns: dict[str, float] = field(default_factory=dict)
    #: A competitive env that names its winners (`srl.api.env.WINNER`): the episodes each agent
    #: (a team: its agents joined by commas) won, and `draw`, over the same episodes.
    outcomes: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def env_slot(env: EnvConfig | Mapping[str, Any], n_envs: int, seed: int) -> EnvSlot:
    """`n_envs` envs of an `env` config section, seeded `seed`, `seed + 1`, ..., in one slot to `play` on."""
    env = EnvConfig.model_validate(dict(env)) if isinstance(env, Mapping) else env
    envs = [make_env(env) for _ in range(n_envs)]
    kind = GymSlot if GymSlot.takes(envs) else EnvSlot
    return kind(envs, [seed + j for j in range(n_envs)], str(env.id or env.type), env.on_bad_output)


def play_policy(slot: EnvSlot, policy: Policy, episodes: int, deterministic: bool = True) -> Evaluation:
    """`play` with one policy acting for every row of the slot."""
    group = next(iter(slot.groups))
    return play(slot, {"policy": (group, policy, np.arange(slot.rows))}, episodes, deterministic, {})


def play(slot: EnvSlot, players: dict[str, tuple[str, Policy, np.ndarray]], episodes: int, deterministic: bool,
         labels: dict[str, str], recorder: RecordingEnv | None = None) -> Evaluation:
    """Play `episodes` episodes on `slot` (reset first, with `slot.seeds`). Each player is
    (the policy whose rows it acts for, the `Policy` acting, its rows among them).

    Each env plays its share of the episodes (env j: `(episodes + j) // n_envs`) and episodes
    past its share are not counted: taking whichever episodes end first would favour short
    ones, so a policy that fails early on some starts would look worse than it is.
    """
    groups = {p: _rows(g.rows, g.obs_fields) for p, g in slot.groups.items()}
    slot.reset_all({p: obs for p, (obs, _) in groups.items()}, {p: out.alive for p, (_, out) in groups.items()})
    outs = {p: out for p, (_, out) in groups.items()}
    # The envs whose rows of the first policy reset are those that ended episodes.
    first = next(iter(slot.groups))
    agents_per_env = len(slot.groups[first].agents)
    states = {k: policy.initial_state(len(rows)) for k, (_, policy, rows) in players.items()}
    actions: dict[str, np.ndarray] = {}
    share = [(episodes + j) // slot.n_envs for j in range(slot.n_envs)]
    finished: list[Episode] = []
    by_policy: dict[str, list[Episode]] = {}
    steps = 0
    while len(finished) < episodes or (recorder is not None and not recorder.done):
        for key, (group, policy, rows) in players.items():
            reply = policy.rollout(groups[group][0][rows], states[key], deterministic=deterministic)
            if group not in actions:
                n = len(outs[group].reward)
                actions[group] = np.zeros((n, *reply[keys.ACTION].shape[1:]), reply[keys.ACTION].dtype)
            actions[group][rows] = reply[keys.ACTION]
            states[key] = reply[keys.RNN_STATE] if keys.RNN_STATE in reply else states[key]
        for out in outs.values():
            out.reset_rows.clear()
        ended, policies_ended = slot.step(actions, outs)  # writes the next observations into each group's `obs`
        envs = list(dict.fromkeys(r // agents_per_env for r in outs[first].reset_rows))
        kept = _within_share(len(ended), envs, slot, share)
        finished.extend(ended[i] for i in kept)
        for policy, episodes_ended in policies_ended.items():  # one per env that ended, as `ended` when not env-reported
            chosen = kept if len(episodes_ended) == len(ended) else range(len(episodes_ended))
            by_policy.setdefault(policy, []).extend(episodes_ended[i] for i in chosen)
        steps += slot.n_envs
        for key, (group, policy, rows) in players.items():
            reset = set(outs[group].reset_rows)
            local = [i for i, r in enumerate(rows) if r in reset]
            if local and states[key].keys():
                states[key][np.asarray(local)] = policy.initial_state(len(local))
    returns = np.array([r for r, _ in finished[:episodes]])
    lengths = np.array([n for _, n in finished[:episodes]])
    stderr = float(returns.std(ddof=1) / math.sqrt(len(returns))) if len(returns) > 1 else float("nan")
    policy_returns = {p: float(np.mean([r for r, _ in e[:episodes]])) for p, e in by_policy.items() if e}
    winners = slot.pop_winners()
    outcomes: dict[str, int] = {}
    if len(winners) >= len(returns):  # every counted episode named its winner
        for winner in winners[:len(returns)]:
            name = DRAW if winner is None else winner if isinstance(winner, str) else ",".join(sorted(winner))
            outcomes[name] = outcomes.get(name, 0) + 1
    return Evaluation(len(returns), float(returns.mean()), stderr, float(lengths.mean()), steps, labels,
                      policy_returns, outcomes)


def _rows(rows: int, fields: dict[str, tuple[tuple[int, ...], np.dtype]]) -> tuple[NamedArray, SlotStep]:
    """Observations of `rows` rows, and where a slot's step writes them (no time axis: played, not recorded)."""
    obs = NamedArray({k: np.zeros((rows, *shape), dtype) for k, (shape, dtype) in fields.items()})
    return obs, SlotStep(np.zeros(rows, np.float32), np.zeros(rows, bool), np.zeros(rows, bool),
                         np.ones(rows, bool), obs)


def _within_share(ended: int, envs: list[int], slot: Any, share: list[int]) -> list[int]:
    """Which of the `ended` episodes that just ended count: those whose env has not yet played
    its share (`share`, counted down).

    An env slot ends an episode and resets its env in one step, in env order, so the envs
    whose rows were reset (`envs`, in order) are the ones that ended these episodes. A slot where that does not
    hold (an env reporting its own episodes, an EnvPool batch resetting a step later) counts
    every episode, as before.
    """
    if getattr(slot, "reports_episodes", False) or len(envs) != ended:
        return list(range(ended))
    kept = []
    for i, j in enumerate(envs):
        if share[j] > 0:
            share[j] -= 1
            kept.append(i)
    return kept
