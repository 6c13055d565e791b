"""Experiment tracking: a run directory mirrored into one Weights & Biases run.

`RunDir` feeds a `WandbTracker` what it writes to disk: the resolved config (as the W&B run
config), graph.yaml, each metrics.jsonl record (nested keys flattened as for TensorBoard, x-axis
`env_steps`) and summary.json (into the W&B run summary). W&B keeps its own files in
`<run_dir>/wandb/`; the run id is stored there, so `srl train --resume DIR` continues the same
W&B run. `wandb` is imported only when `log.wandb` is set.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

import yaml

from srl.api.config import ConfigError, WandbConfig

#: Under the run directory: W&B's own files, and the id of the W&B run that mirrors this run.
WANDB_DIR = "wandb"
RUN_ID_FILE = "run-id.txt"
#: The x-axis of every metric: the runs' common clock, unlike W&B's own per-call `_step`.
STEP_KEY = "env_steps"


def check_wandb(settings: WandbConfig | None) -> None:
    """Fail at the edge, in one line, when `log.wandb` is set but the package is missing."""
    if settings is not None and importlib.util.find_spec("wandb") is None:
        raise ConfigError("log.wandb: the wandb package is not installed (pip install wandb)")


def resolve_mode(settings: WandbConfig) -> str:
    """The config's mode, else `$WANDB_MODE`, else online."""
    return settings.mode or os.environ.get("WANDB_MODE") or "online"


def start(settings: WandbConfig | None, run_dir: str | Path, config: dict[str, Any]) -> WandbTracker | None:
    """A tracker for the run in `run_dir` when `log.wandb` is set and not disabled, else None."""
    if settings is None or resolve_mode(settings) == "disabled":
        return None
    check_wandb(settings)
    return WandbTracker(settings, Path(run_dir), config)


class WandbTracker:
    """One W&B run per run directory; `close` must follow (it also stops W&B's service process)."""

    def __init__(self, settings: WandbConfig, run_dir: Path, config: dict[str, Any]) -> None:
        import wandb

        self._wandb = wandb
        mode = resolve_mode(settings)
        if mode != "online":
            # Nothing may leave the machine: no error reports to W&B's Sentry either.
            os.environ["WANDB_ERROR_REPORTING"] = "false"
        wandb_dir = run_dir / WANDB_DIR
        wandb_dir.mkdir(parents=True, exist_ok=True)
        id_file = wandb_dir / RUN_ID_FILE
        resuming = id_file.exists()
        run_id = id_file.read_text().strip() if resuming else secrets.token_hex(4)
        try:
            self.run = wandb.init(
                project=settings.project, entity=settings.entity, mode=mode, dir=str(run_dir), id=run_id,
                resume="allow" if resuming and mode == "online" else None,
                name=f"{config.get('name', 'run')}/{run_dir.resolve().name}", config=config,
                # The controller's own terminal line and the workers' logs stay as they are: W&B
                # rewrapping stdout would interleave with the live progress line.
                settings=wandb.Settings(console="off"))
        except wandb.errors.Error as exc:  # not logged in, server unreachable: before any worker starts
            wandb.teardown()
            raise ConfigError(f"log.wandb: W&B could not start the run: {exc} "
                              "Or set log.wandb.mode=offline, and `wandb sync` the run later.") from None
        id_file.write_text(run_id)
        self.run.define_metric(STEP_KEY)
        self.run.define_metric("*", step_metric=STEP_KEY)
        #: Until a summary says otherwise, a run that ends is one that broke off.
        self._exit_code = 1

    def log_graph(self, path: Path) -> None:
        """The worker graph (graph.yaml): a file of the W&B run, and `graph` in its config."""
        self.run.config.update({"graph": yaml.safe_load(path.read_text())}, allow_val_change=True)
        # A copy in the W&B run's files (uploaded with the run) rather than `run.save`'s symlink.
        shutil.copy(path, self.run.dir)

    def log_metrics(self, scalars: dict[str, float]) -> None:
        """One metrics.jsonl record, flattened to scalars, `env_steps` among them."""
        self.run.log(scalars)

    def log_summary(self, summary: dict[str, Any]) -> None:
        """summary.json into the W&B run summary; a run whose workers failed ends as failed."""
        self.run.summary.update(summary)
        self._exit_code = 1 if summary.get("errors") else 0

    def close(self) -> None:
        """Finish the W&B run and stop W&B's service process (idempotent)."""
        if self.run is None:
            return
        run, self.run = self.run, None
        try:
            run.finish(exit_code=self._exit_code)
        finally:
            if self._wandb.run is None:  # tear down only when no other W&B run in this process needs it
                self._wandb.teardown()
