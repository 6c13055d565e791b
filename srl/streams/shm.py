"""POSIX shared-memory segments in /dev/shm, created private to the user (mode 0600).

We map files in /dev/shm directly instead of using `multiprocessing.shared_memory`: its
resource tracker unlinks segments when *any* attached process exits (Python < 3.13),
which breaks segments shared between independently started workers. Every segment of a
run carries the run's prefix so the launcher can sweep whatever a killed worker left.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

SHM_DIR = Path("/dev/shm")
PREFIX = "srl_"


class Segment:
    """A named shared-memory region; the creator unlinks it on `close()`."""

    def __init__(self, name: str, size: int | None = None) -> None:
        if "/" in name:
            raise ValueError(f"bad segment name {name!r}")
        self.name = name
        self.path = SHM_DIR / name
        self.owner = size is not None
        if self.owner:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
            try:
                os.ftruncate(fd, size)
                self._mmap = mmap.mmap(fd, size)
            finally:
                os.close(fd)
        else:
            fd = os.open(self.path, os.O_RDWR)
            try:
                self._mmap = mmap.mmap(fd, os.fstat(fd).st_size)
            finally:
                os.close(fd)
        self.buf = memoryview(self._mmap)
        self.size = len(self._mmap)

    @classmethod
    def create(cls, name: str, size: int) -> Segment:
        return cls(name, size)

    @classmethod
    def attach(cls, name: str) -> Segment:
        return cls(name)

    def close(self) -> None:
        """Unmap (and unlink, for the creator). Views still alive keep the mapping open."""
        try:
            self.buf.release()
            self._mmap.close()
        except (BufferError, ValueError):
            pass  # numpy views still reference it; the OS frees it when they go
        if self.owner:
            self.path.unlink(missing_ok=True)
            self.owner = False


def sweep(run_prefix: str) -> list[str]:
    """Unlink every segment whose name starts with `run_prefix`; returns their names."""
    removed = []
    for path in SHM_DIR.glob(f"{run_prefix}*"):
        try:
            if path.stat().st_uid != os.getuid():  # not ours: never another user's segment
                continue
            path.unlink()
        except OSError:  # gone meanwhile, or not ours to remove: cleanup must not fail the run
            continue
        removed.append(path.name)
    return removed
