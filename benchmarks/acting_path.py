"""An actor's forward pass in NumPy against the same pass in torch, side by side.

Feed-forward policies act through NumPy copies of their layers (srl/models/numpy_forward.py).
This times one policy's `rollout` both ways, on the config's own env and slot size, in two
settings: a tight loop of forward passes, and an actor's loop (a forward pass, then the slot's
env step), where the env's code in between cools the caches. The two paths alternate in
rounds, so the machine's drift falls on both.

    python benchmarks/acting_path.py cartpole-dqn cartpole-ppo halfcheetah-ppo --seconds 2 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any


from srl.api.agents import DEFAULT_POLICY
from srl.api.config import load
from srl.api.env import spaces_of
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.envs.slot_builder import make_slots
from srl.api.components import make_env, make_policy
from srl.workers.env_ring import EnvRing
from srl.workers.threads import compute_threads


def _actor(config_name: str) -> tuple[Any, EnvRing]:
    config = load(config_name)
    env_section = config.env
    probe = make_env(env_section)
    spaces = spaces_of(probe)
    probe.close()
    policy = make_policy(config.policy, *spaces)
    n = config.actors.envs_per_slot
    ring = EnvRing(make_slots(lambda: make_env(env_section), 1, n, seed=0, env_config=env_section),
                   config.actors.trajectory_length, policy.initial_state)
    return policy, ring


def _time(policy: Any, ring: EnvRing, request: Any, seconds: float, with_env: bool) -> tuple[float, float, Any]:
    """µs per forward pass, and env steps/s of the loop (with the env), over `seconds`."""
    forward_s, calls, start = 0.0, 0, time.perf_counter()
    steps_before = ring.env_steps
    while time.perf_counter() - start < seconds:
        t = time.perf_counter()
        reply = policy.rollout(request[keys.OBS], NamedArray())  # (feed-forward: no state)
        forward_s += time.perf_counter() - t
        calls += 1
        if with_env:
            requests, _ = ring.step(0, {DEFAULT_POLICY: reply})
            request = requests[DEFAULT_POLICY]
    elapsed = time.perf_counter() - start
    return forward_s / calls * 1e6, (ring.env_steps - steps_before) / elapsed, request


def measure(config_name: str, seconds: float, rounds: int) -> dict[str, Any]:
    policy, ring = _actor(config_name)
    numpy_path = policy._numpy
    if numpy_path is None:
        raise SystemExit(f"{config_name}: its policy has no NumPy acting path (a CNN, an LSTM or a GPU)")
    request = ring.start(0)[DEFAULT_POLICY]
    paths = {"torch": None, "numpy": numpy_path}
    results: dict[str, dict[str, list[float]]] = {p: {"tight_us": [], "actor_us": [], "actor_steps_s": []} for p in paths}
    for _ in range(rounds):
        for name, acting in paths.items():
            policy._numpy = acting  # None: the policy's torch path
            _time(policy, ring, request, 0.2, with_env=True)  # warm-up
            tight_us, _, _ = _time(policy, ring, request, seconds / 2, with_env=False)
            actor_us, steps_s, request = _time(policy, ring, request, seconds, with_env=True)
            results[name]["tight_us"].append(tight_us)
            results[name]["actor_us"].append(actor_us)
            results[name]["actor_steps_s"].append(steps_s)
    policy._numpy = numpy_path
    for slot in ring.slots:
        slot.close()
    return {"config": config_name, "rows": ring.slots[0].rows, **results}


def _span(values: list[float], form: str = "{:.0f}") -> str:
    return "–".join(form.format(v) for v in (min(values), max(values)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="+")
    parser.add_argument("--seconds", type=float, default=2.0, help="each measurement in the actor's loop")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    compute_threads(1)  # as in the workers
    out = []
    print(f"{'config':<16} {'rows':>4} {'path':<6} {'tight µs':>16} {'in the loop µs':>16} {'loop env steps/s':>22}")
    for name in args.configs:
        result = measure(name, args.seconds, args.rounds)
        out.append(result)
        for path in ("torch", "numpy"):
            r = result[path]
            print(f"{name:<16} {result['rows']:>4} {path:<6} {_span(r['tight_us']):>16} {_span(r['actor_us']):>16} "
                  f"{_span(r['actor_steps_s'], '{:,.0f}'):>22}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
