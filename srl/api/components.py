"""Build the user's components (env, policy, algorithm) from their config sections.

What any worker kind calls to build the run's env and policy (docs/graph.md, "Writing a worker
kind"); each takes its typed section (`EnvConfig`, `ComponentConfig`) or a mapping of one,
which is validated into it, so every default comes from the config model:

    env = make_env(settings.env)                     # or make_env({"type": "gym", "id": "CartPole-v1"})
    policy = make_policy(settings.policy, *spaces_of(env))
    algorithm = make_algorithm(settings.algorithm, policy)
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from srl.api.algorithm import Algorithm
from srl.api.config import ComponentConfig, EnvConfig
from srl.api.env import Env, spaces_of
from srl.api.policy import Policy
from srl.api.registry import ALGORITHMS, ENVS, POLICIES

__all__ = ["make_algorithm", "make_env", "make_policy", "spaces_of"]


def _section(model: type, given: Any) -> Any:
    return model.model_validate(dict(given)) if isinstance(given, Mapping) else given


def make_env(env: EnvConfig | Mapping[str, Any], render: bool = False) -> Env:
    """The env its config section describes; `render=True` asks for `Env.render()` frames.

    The request reaches constructors that take a `render` argument (the bundled adapters);
    any other env is built as it is and renders only if it can anyway.
    """
    env = _section(EnvConfig, env)
    kwargs = dict(env.args)
    if env.id:
        kwargs["id"] = env.id
    cls = ENVS.resolve(env.type)
    if render and "render" in inspect.signature(cls).parameters:
        kwargs.setdefault("render", True)
    made = cls(**kwargs)
    if not isinstance(made, Env):
        raise TypeError(f"env.type {env.type!r} built a {type(made).__name__}, not an srl.api.Env")
    return made


def make_policy(policy: ComponentConfig | Mapping[str, Any], observation_space: Any, action_space: Any,
                device: str = "cpu") -> Policy:
    policy = _section(ComponentConfig, policy)
    cls = POLICIES.resolve(policy.type)
    kwargs = dict(policy.args)
    if "device" in inspect.signature(cls).parameters:
        kwargs["device"] = device
    return cls(observation_space, action_space, **kwargs)


def make_algorithm(algorithm: ComponentConfig | Mapping[str, Any], policy: Policy) -> Algorithm:
    algorithm = _section(ComponentConfig, algorithm)
    cls = ALGORITHMS.resolve(algorithm.type)
    return cls(policy, cls.Config(**algorithm.args))
