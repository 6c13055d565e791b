"""Build an actor's env slots from the env section of the config."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from srl.api.config import EnvConfig
from srl.api.env import Env
from srl.envs.gym_slot import GymSlot
from srl.envs.slots import EnvSlot, Slot


def make_slots(make_env: Callable[[], Env], ring_size: int, envs_per_slot: int, seed: int,
               env_config: EnvConfig | None = None, policy_of: Mapping[str, str] | None = None) -> list[Slot]:
    """Build `ring_size` slots of `envs_per_slot` envs with distinct seeds starting at `seed`.

    `policy_of`: the policy each agent acts with, when several do (`srl.envs.slots.EnvSlot`).
    With the `env_config` section's `backend: envpool` each slot is one EnvPool batch built from
    that section instead.
    """
    if env_config is not None and env_config.backend == "envpool":
        from srl.envs.envpool_slot import EnvPoolSlot

        if policy_of is not None:
            raise ValueError("env.backend=envpool: one policy acts for every agent (the config's `policies:` "
                             "need the python backend)")

        section = env_config.model_dump()
        return [EnvPoolSlot(section, envs_per_slot, seed + k * envs_per_slot) for k in range(ring_size)]
    slots: list[Slot] = []
    name = str(env_config.id or env_config.type) if env_config is not None else "env"
    on_bad = (env_config or EnvConfig()).on_bad_output
    for k in range(ring_size):
        envs = [make_env() for _ in range(envs_per_slot)]
        seeds = [seed + k * envs_per_slot + j for j in range(envs_per_slot)]
        if policy_of is None and GymSlot.takes(envs):  # plain Gymnasium envs skip the per-agent objects
            slots.append(GymSlot(envs, seeds, name, on_bad))
        else:
            slots.append(EnvSlot(envs, seeds, name, on_bad, policy_of))
    return slots
