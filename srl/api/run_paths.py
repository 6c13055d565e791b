"""Where each file of a run lives: the one place a run directory's paths are built.

Every reader and writer asks a `RunPaths` (the controller, the workers, `srl evaluate`,
`srl runs`, a user's worker kind through `WorkerSpec.run_dir`), so a new file of the run is
named here once:

    paths = RunPaths(spec.run_dir)
    paths.checkpoints()            # runs/<name>/<trial>/checkpoints
    paths.checkpoints("seeker")    # one directory per policy, with several policies
    paths.member("m1").checkpoints()   # a population member's own directory, laid out alike
"""

from __future__ import annotations

from pathlib import Path


class RunPaths:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"RunPaths({str(self.root)!r})"

    # ---------------------------------------------------------------- the run's files
    @property
    def config(self) -> Path:
        """The resolved config (every default filled in): `srl train --resume` and `srl evaluate` read it."""
        return self.root / "config.yaml"

    @property
    def graph(self) -> Path:
        """The worker graph that ran (groups and streams)."""
        return self.root / "graph.yaml"

    @property
    def layout(self) -> Path:
        """What `auto` chose, and why."""
        return self.root / "layout.json"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def status(self) -> Path:
        """Rewritten while the run goes (what `srl status` and `srl top` read)."""
        return self.root / "status.json"

    @property
    def summary(self) -> Path:
        """Written when the run ends."""
        return self.root / "summary.json"

    @property
    def lineage(self) -> Path:
        """A population's copies, one line each."""
        return self.root / "lineage.jsonl"

    @property
    def lock(self) -> Path:
        """Held by the run's controller for its whole life."""
        return self.root / ".lock"

    # ---------------------------------------------------------------- its directories
    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def log(self, worker: str) -> Path:
        return self.logs / f"{worker}.log"

    @property
    def tensorboard(self) -> Path:
        return self.root / "tensorboard"

    @property
    def workdir(self) -> Path:
        """The working directory of the run's processes (simulators that write files write them here)."""
        return self.root / "workdir"

    def checkpoints(self, policy: str | None = None) -> Path:
        """The policy's checkpoints (with several policies each has a directory of its own)."""
        return self.root / "checkpoints" / policy if policy else self.root / "checkpoints"

    def replay_contents(self, buffer_index: int) -> Path:
        """What a replay buffer worker saved of its contents."""
        return self.checkpoints() / f"replay-{buffer_index}.npz"

    @property
    def league(self) -> Path:
        """Self-play's policy pool: its index and its frozen versions."""
        return self.root / "league"

    @property
    def pool(self) -> Path:
        return self.league / "pool.sqlite"

    @property
    def members(self) -> Path:
        return self.root / "members"

    def member(self, name: str) -> RunPaths:
        """A population member's own directory (its checkpoints, logs and metrics), laid out as a run's."""
        return RunPaths(self.members / name)

    # ---------------------------------------------------------------- what it is
    def is_run(self) -> bool:
        """Whether this holds a run (a config, and a status or a summary once it has reported)."""
        return self.config.is_file() and (self.status.is_file() or self.summary.is_file())

    #: Directories of a run that hold no run of their own (`srl runs` skips them when it searches).
    OWN_DIRECTORIES = ("checkpoints", "logs", "tensorboard", "workdir", "league", "wandb")
