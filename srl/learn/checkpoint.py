"""Checkpoints: atomic writes (temp file, fsync, rename), a checksum, newest N kept.

Each checkpoint is `ckpt-<version>.pt` (torch) beside `ckpt-<version>.json` with the
counters a launcher needs without loading torch (version, env steps) and the SHA-256 of
the `.pt` file. `latest()` skips a checkpoint whose file is truncated or corrupt (or whose
sidecar is missing) and falls back to the previous one. A *tagged* checkpoint (`best.pt`,
written by an evaluation worker) has the same format and lies outside that rotation.

A checkpoint holds tensors, numbers, strings and containers of them, nothing else: arrays
are saved as tensors and files are read with `torch.load(weights_only=True)`, whose
unpickler builds only those types. A file that asks for anything else (a class, a function:
code that would run on load) is refused with `CheckpointError`, and nothing in it runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

log = logging.getLogger(__name__)


class CheckpointError(ValueError):
    """A checkpoint file that cannot be loaded safely: one line naming the file and why."""


def atomic_write(path: Path, write: Callable[[BinaryIO], object], fsync: bool = True) -> None:
    """`write(file)` into a temp file, then rename it to `path`: readers see the old file or the new.

    A failed write (a full disk, a read-only directory) removes the temp file and raises an
    `OSError` naming the cause. `fsync`: on disk before the rename (a crash leaves no empty file).
    """
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:  # a full disk: no partial temp file left to fill it further
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        # torch reports a failed write as a RuntimeError of its own: name the OSError beneath.
        cause = exc
        while cause is not None and not isinstance(cause, OSError):
            cause = cause.__cause__ or cause.__context__
        if cause is not None and cause is not exc:
            raise OSError(cause.errno, cause.strerror) from exc
        raise


def path_of(directory: str | Path, version: int) -> Path:
    """Where version `version`'s checkpoint lives in `directory`."""
    return Path(directory) / f"ckpt-{version:09d}.pt"


_NAME = re.compile(r"ckpt-(\d+)\.pt")


def versions(directory: str | Path) -> list[int]:
    """The versions `directory` holds a checkpoint of, oldest first (other files are not checkpoints)."""
    found = (_NAME.fullmatch(p.name) for p in Path(directory).glob("ckpt-*.pt"))
    return sorted(int(match.group(1)) for match in found if match)


def save(directory: str | Path, version: int, state: dict[str, Any], info: dict[str, Any], keep: int) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = _write(path_of(directory, version), version, state, info)
    for old in versions(directory)[:-keep]:
        stale = path_of(directory, old)
        stale.unlink(missing_ok=True)
        stale.with_suffix(".json").unlink(missing_ok=True)
    return path


def save_tagged(directory: str | Path, tag: str, version: int, state: dict[str, Any], info: dict[str, Any]) -> Path:
    """`<tag>.pt` (and its sidecar), written like `save` but outside the rotation: `keep`
    never removes it and `latest` never picks it (the `best` an evaluation worker keeps)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    return _write(directory / f"{tag}.pt", version, state, info)


def tagged(directory: str | Path, tag: str) -> Path | None:
    """`<tag>.pt` in `directory` if it is there and its checksum holds."""
    path = Path(directory) / f"{tag}.pt"
    return path if path.is_file() and is_valid(path) else None


def _write(path: Path, version: int, state: dict[str, Any], info: dict[str, Any]) -> Path:
    import torch  # lazily: launchers read checkpoint info without loading torch

    atomic_write(path, lambda f: torch.save(_as_tensors(state), f))
    sidecar = {"version": version, **info, "sha256": _sha256(path)}
    atomic_write(path.with_suffix(".json"), lambda f: f.write(json.dumps(sidecar).encode()))
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
        sidecar = json.loads(path.with_suffix(".json").read_text())
        return isinstance(sidecar, dict) and sidecar.get("sha256") == _sha256(path)
    except (OSError, ValueError):
        return False


def latest(directory: str | Path) -> Path | None:
    """The newest checkpoint whose checksum holds (older ones are tried in turn)."""
    for stray in sorted(p.name for p in Path(directory).glob("ckpt-*.pt") if not _NAME.fullmatch(p.name)):
        log.warning("%s in %s is not a checkpoint's name (ckpt-<version>.pt): ignored", stray, directory)
    for version in reversed(versions(directory)):
        path = path_of(directory, version)
        if is_valid(path):
            return path
        log.warning("checkpoint %s is corrupt or incomplete; trying the previous one", path.name)
    return None


def load(path: str | Path) -> dict[str, Any]:
    """The state saved in `path`; raises `CheckpointError` for a file that is not plain weights,
    or that would take more memory to load than its own size."""
    import pickle

    import torch

    path = Path(path)
    _check_archive(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, AttributeError, ValueError) as exc:
        # torch names the first global the file asked for (a function to call, a class to build).
        found = re.search(r"(?:unsupported GLOBAL|Unsupported global: GLOBAL) (\S+)", str(exc))
        reason = f"it asks for {found.group(1)}" if found else f"{type(exc).__name__}: {str(exc).strip()[:100]}"
        raise CheckpointError(f"checkpoint {path}: refused, not a plain-weights file ({reason})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {path}: refused, holds a {type(state).__name__}, not a mapping of states")
    _check_dense(path, state)
    return state


def _check_archive(path: Path) -> None:
    """Refuse an archive that unpacks to more than it holds: torch stores every entry uncompressed,
    so a compressed entry (a zip bomb's) is not torch's, and the entries' sizes are the file's."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            entries = archive.infolist()
    except (OSError, zipfile.BadZipFile) as exc:
        raise CheckpointError(f"checkpoint {path}: refused, not a checkpoint archive ({exc})") from None
    packed = [e.filename for e in entries if e.compress_type != zipfile.ZIP_STORED]
    if packed:
        raise CheckpointError(f"checkpoint {path}: refused, {packed[0]} is compressed (a checkpoint's entries are "
                              "stored as they are)")
    if sum(e.file_size for e in entries) > path.stat().st_size:
        raise CheckpointError(f"checkpoint {path}: refused, its entries declare more bytes than the file holds")


def _tensors(state: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    """Every tensor in a (nested) state, with its path (`policy.params.w`, `opt[0]`)."""
    import torch

    if isinstance(state, torch.Tensor):
        yield where, state
    elif isinstance(state, dict):
        for key, value in state.items():
            yield from _tensors(value, f"{where}.{key}" if where else str(key))
    elif isinstance(state, (list, tuple)):
        for i, value in enumerate(state):
            yield from _tensors(value, f"{where}[{i}]")


def _check_dense(path: Path, state: Any) -> None:
    """Refuse a tensor that views more elements than its storage holds (a zero-stride view of one
    number can claim gigabytes, which any copy of it would then allocate)."""
    for where, tensor in _tensors(state):
        stored = tensor.untyped_storage().nbytes()
        if tensor.numel() * tensor.element_size() > stored:
            raise CheckpointError(f"checkpoint {path}: refused, {where or 'a tensor'} of shape {list(tensor.shape)} "
                                  f"views {stored} bytes of storage (overlapping strides)")


def finite(state: Any) -> bool:
    """Whether every floating-point tensor in a (nested) state holds finite values."""
    return all(not t.is_floating_point() or bool(t.isfinite().all()) for _, t in _tensors(state))


def _as_tensors(state: Any) -> Any:
    """`state` with every numpy array (and numpy scalar) as a tensor, so it loads with weights_only."""
    import numpy as np
    import torch

    if isinstance(state, dict):
        return {k: _as_tensors(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(_as_tensors(v) for v in state)
    if isinstance(state, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(state))
    if isinstance(state, np.generic):
        return state.item()
    return state


def info(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).with_suffix(".json").read_text())
