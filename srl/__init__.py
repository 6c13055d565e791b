"""SRL: a dataflow reinforcement-learning system that scales from a laptop to a cluster."""

import os

# Before anything imports torch (its OpenMP runtime reads this once, when it loads), and
# inherited by every worker process: a trainer's idle intra-op threads sleep between parallel
# regions instead of spinning for the CPU the samplers beside it need. A two-thread trainer
# whose second core also runs another process spun its thread at that core's pace, and trained
# far slower beside a busy core and measurably slower on a quiet box (docs/benchmarks.md,
# "Measurements behind the code"). A value the user set is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"

#: The Python API (srl/run.py), imported on first use: `import srl` stays light for workers.
_API = ("train", "start", "launch", "load_policy", "Run", "Handle", "LoadedPolicy")


def __getattr__(name: str):
    if name in _API:
        from srl import run

        return getattr(run, name)
    raise AttributeError(f"module 'srl' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
