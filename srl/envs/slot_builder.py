"""Build an actor's env slots from the env section of the config."""

from __future__ import annotations

from collections.abc import Callable

from srl.api.env import Env
from srl.envs.gym_slot import GymSlot
from srl.envs.slots import EnvSlot, Slot


def make_slots(make_env: Callable[[], Env], ring_size: int, envs_per_slot: int, seed: int,
               backend: str = "python", env_config: dict | None = None) -> list[Slot]:
    """Build `ring_size` slots of `envs_per_slot` envs with distinct seeds starting at `seed`.

    `backend="envpool"` builds each slot as one EnvPool batch from the `env_config` section.
    """
    if backend == "envpool":
        from srl.envs.envpool_slot import EnvPoolSlot

        return [EnvPoolSlot(env_config or {}, envs_per_slot, seed + k * envs_per_slot) for k in range(ring_size)]
    slots: list[Slot] = []
    name = str((env_config or {}).get("id") or (env_config or {}).get("type") or "env")
    on_bad = (env_config or {}).get("on_bad_output", "raise")
    for k in range(ring_size):
        envs = [make_env() for _ in range(envs_per_slot)]
        # Plain Gymnasium envs skip the per-agent objects of the general path.
        kind = GymSlot if GymSlot.takes(envs) else EnvSlot
        slots.append(kind(envs, [seed + k * envs_per_slot + j for j in range(envs_per_slot)], name, on_bad))
    return slots
