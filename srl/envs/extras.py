"""Optional dependencies: one clear line saying what to install when a suite's extra is missing."""

from __future__ import annotations

import importlib
from types import ModuleType


class MissingExtra(ImportError):
    pass


def require(module: str, extra: str, hint: str = "") -> ModuleType:
    """Import `module`, or fail with the pip command that installs the `extra`."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        more = f" {hint}" if hint else ""
        raise MissingExtra(f"the {extra} environments need `pip install -e '.[{extra}]'` ({module}: {exc}).{more}") from None
