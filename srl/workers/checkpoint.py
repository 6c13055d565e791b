"""Checkpoints: atomic writes (temp file, fsync, rename), a checksum, newest N kept.

Each checkpoint is `ckpt-<version>.pt` (torch) beside `ckpt-<version>.json` with the
counters a launcher needs without loading torch (version, env steps) and the SHA-256 of
the `.pt` file. `latest()` skips a checkpoint whose file is truncated or corrupt (or whose
sidecar is missing) and falls back to the previous one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any


log = logging.getLogger(__name__)


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
    sidecar = {"version": version, **info, "sha256": _sha256(path)}
    _atomic_write(path.with_suffix(".json"), lambda f: f.write(json.dumps(sidecar).encode()))
    for old in sorted(directory.glob("ckpt-*.pt"))[:-keep]:
        old.unlink(missing_ok=True)
        old.with_suffix(".json").unlink(missing_ok=True)
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def is_valid(path: str | Path) -> bool:
    path = Path(path)
    try:
        return json.loads(path.with_suffix(".json").read_text()).get("sha256") == _sha256(path)
    except (OSError, ValueError):
        return False


def latest(directory: str | Path) -> Path | None:
    """The newest checkpoint whose checksum holds (older ones are tried in turn)."""
    for path in sorted(Path(directory).glob("ckpt-*.pt"), reverse=True):
        if is_valid(path):
            return path
        log.warning("checkpoint %s is corrupt or incomplete; trying the previous one", path.name)
    return None


def load(path: str | Path) -> dict[str, Any]:
    import torch

    return torch.load(path, map_location="cpu", weights_only=False)


def info(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).with_suffix(".json").read_text())
