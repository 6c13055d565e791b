"""An env ring slot backed by EnvPool: all the slot's envs step in one C++ call.

`env.backend: envpool` swaps each `EnvSlot` of Python envs for one EnvPool batch of
`envs_per_slot` envs; the ring rotates over batches exactly as over Python slots, and
the same config (type, id, args) describes the env either way:

* `env.type: atari`: the id may be Gymnasium's (`ALE/Pong-v5`, `PongNoFrameskip-v4`);
  `env.args` are `AtariEnv`'s (with its defaults: episodic life, clipped rewards, FIRE on
  reset, no sticky actions) and are translated to EnvPool's names. The episode return
  is the true game score, summed from EnvPool's unclipped `info["reward"]` until its
  `info["terminated"]` (game over) or a truncation.
* `env.type: gym`: an id EnvPool knows (`HalfCheetah-v5`, `CartPole-v1`); `env.args` go
  to EnvPool as they are. The episode return is the sum of rewards.

EnvPool resets an env on the step *after* it finished (that step ignores its action
and returns the first observation of the next episode). The row holding the finished
episode's last observation therefore becomes a masked placeholder (`alive = 0`,
terminated, reward 0), the same mechanism that masks agents who finish early, so the
learner never sees it. It costs one wasted env step per episode (per life with
episodic life), which the ring still counts as an env step.

The pool is stepped synchronously (`reset()` then `step()`, never mixed with
`async_reset()`): the actor's other slots and the policy workers overlap with it
already, and on Pong the asynchronous `send`/`recv` form cost the same CPU per step.
One C++ thread per pool: on a small machine the policy workers and the trainer need
the other cores (a pool steps Pong with ~15% less CPU than the Python `AtariEnv`).
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import gymnasium as gym
import numpy as np

from srl.data.named_array import NamedArray
from srl.envs.extras import require
from srl.api.agents import DEFAULT_POLICY
from srl.envs.gym import AGENT
from srl.envs.slots import Episode, PolicyRows, Slot, SlotStep

#: AtariEnv's argument names -> EnvPool's.
_ATARI_ARGS = {
    "episodic_life": "episodic_life", "clip_rewards": "reward_clip", "noop_max": "noop_max",
    "frame_skip": "frame_skip", "stack": "stack_num", "fire_reset": "use_fire_reset",
    "repeat_action_probability": "repeat_action_probability", "full_action_space": "full_action_space",
}


def _atari_defaults() -> dict[str, Any]:
    """AtariEnv's keyword defaults: one source of truth for both backends."""
    from srl.envs.atari import AtariEnv

    params = inspect.signature(AtariEnv.__init__).parameters.values()
    return {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}


def envpool_task(env: dict[str, Any]) -> tuple[str, dict[str, Any], bool]:
    """(EnvPool task id, its keyword arguments, whether it is Atari) for an `env` config section."""
    args = dict(env.get("args") or {})
    if env["type"] == "atari":
        name = (env.get("id") or "ALE/Pong-v5").split("/")[-1]
        task = re.sub(r"(NoFrameskip|Deterministic)?-v\d+$", "-v5", name)
        # `render` asks AtariEnv for frames (videos); EnvPool slots never render.
        options = {k: v for k, v in {**_atari_defaults(), **args}.items() if k != "render"}
        kwargs = {_ATARI_ARGS[k]: v for k, v in options.items() if k in _ATARI_ARGS}
        kwargs["img_height"] = kwargs["img_width"] = options["screen_size"]
        unknown = set(options) - set(_ATARI_ARGS) - {"screen_size"}
        if unknown:
            raise ValueError(f"env.args {sorted(unknown)} have no EnvPool equivalent")
        return task, kwargs, True
    if env["type"] == "gym" and env.get("id"):
        return env["id"], args, False
    raise ValueError(f"env.backend=envpool runs env.type atari or gym (with an EnvPool id), not {env['type']!r}")


class EnvPoolSlot(Slot):
    def __init__(self, env: dict[str, Any], n_envs: int, seed: int, num_threads: int = 1) -> None:
        envpool = require("envpool", "envpool")
        task, kwargs, self.atari = envpool_task(env)
        if task not in envpool.list_all_envs():
            raise ValueError(f"EnvPool has no task {task!r} (from env.id {env.get('id')!r})")
        self.pool = envpool.make(task, env_type="gymnasium", num_envs=n_envs, batch_size=n_envs,
                                 num_threads=num_threads, seed=seed, **kwargs)
        self.n_envs = n_envs
        space = self.pool.observation_space
        self._dict_obs = isinstance(space, gym.spaces.Dict)
        obs_space = space if self._dict_obs else gym.spaces.Dict({"obs": space})
        self.groups = {DEFAULT_POLICY: PolicyRows.of((AGENT,), n_envs, (obs_space, self.pool.action_space))}
        self._action_dtype = self.pool.action_space.dtype
        #: Envs whose episode ended on the last step: EnvPool resets them on this one.
        self.resetting = np.zeros(n_envs, bool)
        self.returns = np.zeros(n_envs)
        self.lengths = np.zeros(n_envs, np.int64)

    def _write_obs(self, dest: NamedArray, obs: Any) -> None:
        for name, value in (obs.items() if self._dict_obs else [("obs", obs)]):
            dest[name][:] = value

    def reset_all(self, obs: dict[str, NamedArray], alive: dict[str, np.ndarray]) -> None:
        first, _ = self.pool.reset()
        self._write_obs(obs[DEFAULT_POLICY], first)
        self.resetting[:] = False
        self.returns[:] = 0.0
        self.lengths[:] = 0
        alive[DEFAULT_POLICY][:] = True

    def step(self, actions: dict[str, np.ndarray], out: dict[str, SlotStep]) -> tuple[list[Episode],
                                                                                       dict[str, list[Episode]]]:
        out = out[DEFAULT_POLICY]
        actions = np.asarray(actions[DEFAULT_POLICY], self._action_dtype)
        obs, reward, terminated, truncated, info = self.pool.step(actions)
        resetting, live = self.resetting, ~self.resetting
        # A resetting env's row holds last episode's final observation: a masked placeholder.
        out.reward[:] = np.where(live, reward, 0.0)
        out.terminated[:] = terminated | resetting
        out.truncated[:] = truncated & live
        out.reset_rows.extend(np.flatnonzero(resetting).tolist())
        ended = (terminated | truncated) & live
        self.returns += np.where(live, info["reward"] if self.atari else reward, 0.0)
        self.lengths += live
        game_over = (info["terminated"].astype(bool) | truncated) & live if self.atari else ended
        finished = [(float(self.returns[j]), int(self.lengths[j])) for j in np.flatnonzero(game_over)]
        self.returns[game_over] = 0.0
        self.lengths[game_over] = 0
        self._write_obs(out.next_obs, obs)
        self.resetting = ended
        out.alive[:] = ~ended
        return finished, {}

    def close(self) -> None:
        self.pool.close()
