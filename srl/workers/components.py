"""Build the user's components (env, policy, algorithm) from their config sections."""

from __future__ import annotations

import inspect
from typing import Any

from srl.api.algorithm import Algorithm
from srl.api.env import Env
from srl.api.policy import Policy
from srl.api.registry import ALGORITHMS, ENVS, POLICIES


def make_env(env: dict[str, Any], render: bool = False) -> Env:
    """The env its config section describes; `render=True` asks for `Env.render()` frames.

    The request reaches constructors that take a `render` argument (the bundled adapters);
    any other env is built as it is and renders only if it can anyway.
    """
    kwargs = dict(env.get("args") or {})
    if env.get("id"):
        kwargs["id"] = env["id"]
    cls = ENVS.resolve(env["type"])
    if render and "render" in inspect.signature(cls).parameters:
        kwargs.setdefault("render", True)
    made = cls(**kwargs)
    if not isinstance(made, Env):
        raise TypeError(f"env.type {env['type']!r} built a {type(made).__name__}, not an srl.api.Env")
    return made


def make_policy(policy: dict[str, Any], observation_space: Any, action_space: Any, device: str = "cpu") -> Policy:
    cls = POLICIES.resolve(policy["type"])
    kwargs = dict(policy.get("args") or {})
    if "device" in inspect.signature(cls).parameters:
        kwargs["device"] = device
    return cls(observation_space, action_space, **kwargs)


def make_algorithm(algorithm: dict[str, Any], policy: Policy) -> Algorithm:
    cls = ALGORITHMS.resolve(algorithm["type"])
    return cls(policy, cls.Config(**(algorithm.get("args") or {})))
