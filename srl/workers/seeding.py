"""Seeds: the run's one `seed` drives every worker's random generators.

Each worker draws from a stream of its own, derived from the run seed, its identity (group
name, index in the group) and its restart generation. Actors forked from one process then
draw different action noise, a restarted worker does not replay its predecessor's draws,
and a rerun with the same seed repeats every draw.

    seed_process(worker_seed(spec.seed, spec.group, spec.index, spec.generation))
"""

from __future__ import annotations

import hashlib
import random

import numpy as np
import torch

_U64 = (1 << 64) - 1


def worker_seed(run_seed: int, group: str, index: int, generation: int = 0) -> int:
    """A 63-bit seed for one worker, the same in every process and on every host.

    The group name is hashed with SHA-256, not Python's `hash()`, which is salted per
    process. numpy's `SeedSequence` mixes the parts, so neighbouring inputs (index 0 and 1,
    seed 1 and 2) give unrelated seeds.
    """
    group_key = int.from_bytes(hashlib.sha256(group.encode()).digest()[:8], "little")
    sequence = np.random.SeedSequence(run_seed & _U64, spawn_key=(group_key, index, generation))
    return int(sequence.generate_state(1, np.uint64)[0]) >> 1


def seed_process(seed: int) -> None:
    """Seed Python's `random`, numpy's global generator and torch's (CPU and CUDA) with `seed`."""
    random.seed(seed)
    np.random.seed(np.random.SeedSequence(seed).generate_state(4))  # the legacy API takes 32-bit words
    torch.manual_seed(seed)
