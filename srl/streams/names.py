"""Name services: where each stream endpoint listens.

Servers `register` the address they bound; clients `lookup` it (waiting until it
appears). The local launcher uses a directory private to the run; a cluster launcher
plugs in its own key-value store behind the same two methods.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from pathlib import Path


class NameService(ABC):
    """Two methods: publish where you listen, find where a peer listens."""

    @abstractmethod
    def register(self, key: str, value: str) -> None: ...

    @abstractmethod
    def get(self, key: str) -> str | None:
        """The value, or None if nothing is registered under `key` yet."""

    def lookup(self, key: str, timeout_s: float = 60.0) -> str:
        deadline = time.monotonic() + timeout_s
        delay = 0.002
        while (value := self.get(key)) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no endpoint registered as {key!r} after {timeout_s:.0f} s")
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
        return value


class DirectoryNameService(NameService):
    """One file per key in a directory only the run's user can read."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.root / key.replace("/", "%")

    def register(self, key: str, value: str) -> None:
        tmp = self._path(key).with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(value)
        os.replace(tmp, self._path(key))  # atomic: readers never see half a value

    def get(self, key: str) -> str | None:
        try:
            return self._path(key).read_text()
        except FileNotFoundError:
            return None


class RayNameService(NameService):
    """The Ray cluster's own key-value store (GCS), one namespace per run."""

    def __init__(self, namespace: str) -> None:
        from ray.experimental import internal_kv

        self._kv = internal_kv
        self.namespace = namespace

    def register(self, key: str, value: str) -> None:
        self._kv._internal_kv_put(key.encode(), value.encode(), overwrite=True, namespace=self.namespace)

    def get(self, key: str) -> str | None:
        value = self._kv._internal_kv_get(key.encode(), namespace=self.namespace)
        return value.decode() if value else None
