"""Config files: a bundled config by name or a YAML file by path, read strictly (a key given twice
is an error), and `key.sub=value` overrides applied to what was read. `srl.api.config` validates
the result."""

from __future__ import annotations

from collections.abc import Hashable
from importlib import resources
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """One line naming the field that is wrong and why."""


def bundled_configs() -> list[str]:
    files = resources.files("srl.configs").iterdir()
    return sorted(p.name.removesuffix(".yaml") for p in files if p.name.endswith(".yaml"))


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (YAML would keep the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                break  # the base loader says what is wrong with it
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"the key {key!r} is given twice",
                                                        key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def read_config_file(name_or_path: str) -> dict[str, Any]:
    """A bundled config by name, or a YAML file by path."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.exists():
            raise ConfigError(f"config file {name_or_path} does not exist")
        if not path.is_file():
            raise ConfigError(f"config file {name_or_path} is not a file")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"config file {name_or_path}: not UTF-8 text (byte {exc.start})") from None
        except OSError as exc:
            raise ConfigError(f"config file {name_or_path}: cannot be read ({exc.strerror})") from None
    else:
        bundled = resources.files("srl.configs") / f"{name_or_path}.yaml"
        if not bundled.is_file():
            raise ConfigError(f"no bundled config {name_or_path!r}; bundled: {', '.join(bundled_configs())}")
        text = bundled.read_text()
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader) or {}
    except yaml.YAMLError as exc:
        mark, problem = getattr(exc, "problem_mark", None), getattr(exc, "problem", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise ConfigError(f"{name_or_path}: not valid YAML: {where}{problem or str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{name_or_path}: the top level must be a mapping")
    return data


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply `key.sub=value` overrides; values parse as YAML (numbers, bools, lists)."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r}: expected key.sub=value")
        try:
            value = yaml.safe_load(raw) if raw else None
        except yaml.YAMLError:
            value = raw
        node = data
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {item!r}: {part} is not a section")
            node = child
        node[parts[-1]] = value
    return data
