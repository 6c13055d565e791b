"""Checkpoints: atomic writes (temp file, fsync, rename), newest N kept.

Each checkpoint is `ckpt-<version>.pt` (torch) beside `ckpt-<version>.json` with the
counters a launcher needs without loading torch (version, env steps, time).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def _atomic_write(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save(directory: str | Path, version: int, state: dict[str, Any], info: dict[str, Any], keep: int) -> Path:
    import torch  # lazily: launchers read checkpoint info without loading torch

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"ckpt-{version:09d}.pt"
    _atomic_write(path, lambda f: torch.save(state, f))
    _atomic_write(path.with_suffix(".json"), lambda f: f.write(json.dumps({"version": version, **info}).encode()))
    for old in sorted(directory.glob("ckpt-*.pt"))[:-keep]:
        old.unlink(missing_ok=True)
        old.with_suffix(".json").unlink(missing_ok=True)
    return path


def latest(directory: str | Path) -> Path | None:
    found = sorted(Path(directory).glob("ckpt-*.pt"))
    return found[-1] if found else None


def load(path: str | Path) -> dict[str, Any]:
    import torch

    return torch.load(path, map_location="cpu", weights_only=False)


def info(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).with_suffix(".json").read_text())
