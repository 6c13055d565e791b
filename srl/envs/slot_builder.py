"""Build an actor's env slots from the env section of the config."""

from __future__ import annotations

from collections.abc import Callable

from srl.api.config import EnvConfig
from srl.api.env import Env
from srl.envs.gym_slot import GymSlot
from srl.envs.slots import EnvSlot, Slot


def make_slots(make_env: Callable[[], Env], ring_size: int, envs_per_slot: int, seed: int,
               env_config: EnvConfig | None = None) -> list[Slot]:
    """Build `ring_size` slots of `envs_per_slot` envs with distinct seeds starting at `seed`.

    With the `env_config` section's `backend: envpool` each slot is one EnvPool batch built from
    that section instead.
    """
    if env_config is not None and env_config.backend == "envpool":
        from srl.envs.envpool_slot import EnvPoolSlot

        section = env_config.model_dump()
        return [EnvPoolSlot(section, envs_per_slot, seed + k * envs_per_slot) for k in range(ring_size)]
    slots: list[Slot] = []
    name = str(env_config.id or env_config.type) if env_config is not None else "env"
    on_bad = (env_config or EnvConfig()).on_bad_output
    for k in range(ring_size):
        envs = [make_env() for _ in range(envs_per_slot)]
        # Plain Gymnasium envs skip the per-agent objects of the general path.
        kind = GymSlot if GymSlot.takes(envs) else EnvSlot
        slots.append(kind(envs, [seed + k * envs_per_slot + j for j in range(envs_per_slot)], name, on_bad))
    return slots
