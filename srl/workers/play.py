"""Playing episodes without training: a policy (or several, one per group of agents) on an env slot.

    result = play(slot, {"trained": policy}, {"trained": np.arange(slot.rows)}, episodes=10,
                  deterministic=True, labels={})

`srl evaluate` plays a run's checkpoints with it; the evaluation worker plays the newest
version of a training run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from srl.api.policy import Policy
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.envs.slots import EnvSlot, SlotStep

if TYPE_CHECKING:
    from srl.envs.render import RecordingEnv


@dataclass
class Evaluation:
    episodes: int
    return_mean: float
    return_stderr: float
    length_mean: float
    env_steps: int
    #: agent id -> the source it acted with (a checkpoint by its file name)
    agents: dict[str, str]

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def play(slot: EnvSlot, policies: dict[str, Policy], rows_of: dict[str, np.ndarray], episodes: int,
         deterministic: bool, labels: dict[str, str], recorder: RecordingEnv | None = None) -> Evaluation:
    """Play `episodes` episodes on `slot` (reset first, with `slot.seeds`), each policy acting for its rows.

    Each env plays its share of the episodes (env j: `(episodes + j) // n_envs`) and episodes
    past its share are not counted: taking whichever episodes end first would favour short
    ones, so a policy that fails early on some starts would look worse than it is.
    """
    obs = NamedArray({k: np.zeros((slot.rows, *shape), dtype) for k, (shape, dtype) in slot.obs_fields.items()})
    alive = np.ones(slot.rows, bool)
    slot.reset_all(obs, alive)
    states = {s: p.initial_state(len(rows_of[s])) for s, p in policies.items()}
    actions = None
    out = SlotStep(np.zeros(slot.rows, np.float32), np.zeros(slot.rows, bool), np.zeros(slot.rows, bool), alive, obs)
    share = [(episodes + j) // slot.n_envs for j in range(slot.n_envs)]
    finished: list[tuple[float, int]] = []
    steps = 0
    while len(finished) < episodes or (recorder is not None and not recorder.done):
        for source, policy in policies.items():
            rows = rows_of[source]
            reply = policy.rollout(obs[rows], states[source], deterministic=deterministic)
            if actions is None:
                actions = np.zeros((slot.rows, *reply[keys.ACTION].shape[1:]), reply[keys.ACTION].dtype)
            actions[rows] = reply[keys.ACTION]
            states[source] = reply[keys.RNN_STATE] if keys.RNN_STATE in reply else states[source]
        out.reset_rows.clear()
        ended = slot.step(actions, out)  # writes the next observations into `obs`
        finished.extend(_within_share(ended, out.reset_rows, slot, share))
        steps += slot.n_envs
        if out.reset_rows:
            reset = set(out.reset_rows)
            for source, policy in policies.items():
                local = [i for i, r in enumerate(rows_of[source]) if r in reset]
                if local and states[source].keys():
                    states[source][np.asarray(local)] = policy.initial_state(len(local))
    returns = np.array([r for r, _ in finished[:episodes]])
    lengths = np.array([n for _, n in finished[:episodes]])
    stderr = float(returns.std(ddof=1) / math.sqrt(len(returns))) if len(returns) > 1 else float("nan")
    return Evaluation(len(returns), float(returns.mean()), stderr, float(lengths.mean()), steps, labels)


def _within_share(ended: list[tuple[float, int]], reset_rows: list[int], slot: EnvSlot,
                  share: list[int]) -> list[tuple[float, int]]:
    """The episodes that just ended whose env has not yet played its share (`share`, counted down).

    An env slot ends an episode and resets its env in one step, in env order, so the envs
    whose rows were reset are the ones that ended these episodes. A slot where that does not
    hold (an env reporting its own episodes, an EnvPool batch resetting a step later) counts
    every episode, as before.
    """
    envs = list(dict.fromkeys(r // getattr(slot, "n_agents", 1) for r in reset_rows))
    if getattr(slot, "reports_episodes", False) or len(envs) != len(ended):
        return ended
    kept = []
    for j, episode in zip(envs, ended):
        if share[j] > 0:
            share[j] -= 1
            kept.append(episode)
    return kept
