"""POSIX shared-memory segments in /dev/shm, created private to the user (mode 0600).

We map files in /dev/shm directly instead of using `multiprocessing.shared_memory`: its
resource tracker unlinks segments when *any* attached process exits (Python < 3.13),
which breaks segments shared between independently started workers. Every segment of a
run carries the run's prefix so the launcher can sweep whatever a killed worker left.

A mapping keeps no file descriptor open: Python's `mmap` keeps a duplicate of the file's
for as long as the mapping lives (before 3.13), and a policy worker serving thousands of
actors maps two segments per actor, which would exhaust the process's descriptors.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import weakref
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
        flags = os.O_CREAT | os.O_EXCL | os.O_RDWR if self.owner else os.O_RDWR
        fd = os.open(self.path, flags, 0o600)
        try:
            if self.owner:
                os.ftruncate(fd, size)
            self.size = size if size is not None else os.fstat(fd).st_size
            self.buf = _map(fd, self.size)
        finally:
            os.close(fd)

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
        except BufferError:
            pass  # numpy views still reference it; it is unmapped when they go
        if self.owner:
            self.path.unlink(missing_ok=True)
            self.owner = False


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value


def _map(fd: int, size: int) -> memoryview:
    """A shared, writable mapping of `size` bytes of `fd` that needs `fd` no longer; unmapped
    once nothing refers to it (the view returned, its slices and whatever reads through them)."""
    address = _libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
    if address in (None, _MAP_FAILED):
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
    region = (ctypes.c_ubyte * size).from_address(address)
    weakref.finalize(region, _libc.munmap, address, size)
    return memoryview(region).cast("B")


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
