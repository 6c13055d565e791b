"""An env ring slot of Gymnasium envs, stepped directly.

`make_slots` builds one when every env of a slot is a plain `GymEnv`. The envs are the
same; only the per-step path differs from `EnvSlot`'s: one agent per env, so no per-agent
dicts or `AgentStep` objects, and the slot's rewards, flags and observations are written
once per step for all its envs. On CartPole those objects cost more than the env itself.
Reset, the checks (action range, shapes, NaN) and their errors are `EnvSlot`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from srl.api.agents import DEFAULT_POLICY
from srl.api.env import AgentStep, Env
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.envs import checks
from srl.envs.gym import AGENT, GymEnv
from srl.envs.slots import EnvSlot, Episode, SlotStep


class GymSlot(EnvSlot):
    @staticmethod
    def takes(envs: Sequence[Env]) -> bool:
        """Whether these envs are plain `GymEnv`s (a subclass may change how they step)."""
        return all(type(env) is GymEnv for env in envs)

    def __init__(self, envs: Sequence[GymEnv], seeds: Sequence[int], name: str = "env",
                 on_bad_output: checks.OnBadOutput = "raise") -> None:
        super().__init__(envs, seeds, name, on_bad_output)
        self.gym_envs = [env.env for env in envs]
        self.dict_obs = envs[0].dict_obs

    def step(self, actions: dict[str, np.ndarray], out: dict[str, SlotStep]) -> tuple[list[Episode],
                                                                                       dict[str, list[Episode]]]:
        actions, o = actions[DEFAULT_POLICY], out[DEFAULT_POLICY]
        checks.check_actions(self.name, self.only.spaces[1], actions)
        rewards, terminated, truncated, observations = [], [], [], []
        for j, (env, action) in enumerate(zip(self.gym_envs, self.envs[0].gym_actions(actions))):
            obs, reward, term, trunc, _ = env.step(action)
            if term or trunc:
                obs, _ = env.reset()
                o.reset_rows.append(j)
            rewards.append(reward)
            terminated.append(term)
            truncated.append(trunc)
            observations.append(obs)
        o.reward[:] = rewards
        o.terminated[:] = terminated
        o.truncated[:] = truncated
        self._write_rows(o.next_obs, observations)
        self.returns += rewards  # the env's own floats, not the buffer's float32
        self.lengths += 1
        finished = [(float(self.returns[j]), int(self.lengths[j])) for j in o.reset_rows]
        self.returns[o.reset_rows] = 0.0
        self.lengths[o.reset_rows] = 0
        self._check_finite(out)
        o.alive[:] = True
        return finished, {}

    def _write_rows(self, dest: NamedArray, observations: list[Any]) -> None:
        try:
            if self.dict_obs:
                for name in self.obs_fields:
                    dest[name][:] = [obs[name] for obs in observations]
            else:
                dest[keys.OBS][:] = observations
        except (ValueError, TypeError, KeyError):
            # Row by row, for the error that names the env and the field.
            for j, obs in enumerate(observations):
                self._write_obs({DEFAULT_POLICY: dest}, j, {AGENT: AgentStep(self.envs[j].srl_obs(obs))})
            raise
