"""OpenAI-style hide-and-seek on the official MuJoCo bindings, as a PettingZoo env.

Built like PettingZoo's own environments::

    from srl.envs import hide_and_seek
    env = hide_and_seek.parallel_env(n_hiders=2, n_seekers=2)
    obs, infos = env.reset(seed=0)

`parallel_env(**options)` takes the keyword options of `HideAndSeekEnv`; `env(**options)`
gives the same game as a PettingZoo AEC env. Needs the `mujoco` and `pettingzoo` extras.
"""

from __future__ import annotations

from typing import Any

from srl.envs.extras import require
from srl.envs.render import headless_gl

headless_gl()  # rgb_array rendering without a display
require("mujoco", "mujoco")
require("pettingzoo", "pettingzoo")

from srl.envs.hide_and_seek.env import HideAndSeekEnv  # noqa: E402

__all__ = ["HideAndSeekEnv", "env", "parallel_env", "raw_env"]


def parallel_env(**options: Any) -> HideAndSeekEnv:
    """The game as a PettingZoo ParallelEnv."""
    return HideAndSeekEnv(**options)


def env(**options: Any) -> Any:
    """The game as a PettingZoo AEC env (turn by turn over the parallel one)."""
    from pettingzoo.utils.conversions import parallel_to_aec

    return parallel_to_aec(HideAndSeekEnv(**options))


raw_env = parallel_env
