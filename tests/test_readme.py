"""The README's config blocks are the real `cartpole-ppo` and the real defaults."""

import re
from importlib import resources
from pathlib import Path

import yaml

from srl.api.config import validate_structure

README = Path(__file__).resolve().parent.parent / "README.md"


def _yaml_blocks() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", README.read_text(), flags=re.S)


def _merged(base: dict, change: dict) -> dict:
    out = dict(base)
    for key, value in change.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def test_the_config_block_is_the_shipped_cartpole_ppo_file():
    shipped = (resources.files("srl.configs") / "cartpole-ppo.yaml").read_text()
    assert shipped in _yaml_blocks(), "README's cartpole-ppo block differs from srl/configs/cartpole-ppo.yaml"


def test_the_defaults_block_and_the_file_together_are_the_whole_resolved_config():
    shipped = (resources.files("srl.configs") / "cartpole-ppo.yaml").read_text()
    blocks = _yaml_blocks()
    defaults = yaml.safe_load(blocks[blocks.index(shipped) + 1])
    file_part = yaml.safe_load(shipped)
    resolved = validate_structure(yaml.safe_load(shipped)).model_dump(mode="json")
    # Every field the file leaves out is in the defaults block, with its real default value,
    # and the defaults block repeats nothing the file sets.
    assert _merged(defaults, file_part) == resolved
    for section, fields in defaults.items():
        if isinstance(fields, dict) and isinstance(file_part.get(section), dict):
            assert not set(fields) & set(file_part[section]), section
        else:
            assert section not in file_part, section
