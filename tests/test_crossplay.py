"""The cross-play grid's pure parts: versions to sources, the cell's command, the table. No env is played."""

import importlib.util
import shlex
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "crossplay", Path(__file__).resolve().parents[1] / "benchmarks" / "crossplay.py")
crossplay = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(crossplay)


@pytest.fixture
def run(tmp_path):
    for policy, versions in (("seeker", (70, 6, 194)), ("hider", (6,))):
        (tmp_path / "checkpoints" / policy).mkdir(parents=True, exist_ok=True)
        for v in versions:
            (tmp_path / "checkpoints" / policy / f"ckpt-{v:09d}.pt").touch()
    return tmp_path


def test_kept_versions_are_the_checkpoints_numbers_oldest_first(run):
    assert crossplay.kept_versions(run, "seeker") == [6, 70, 194]
    assert crossplay.kept_versions(run, "hider") == [6]


def test_a_version_is_its_checkpoint_and_a_named_source_passes_through(run):
    assert crossplay.source_of(run, "seeker", "70") == str(run / "checkpoints" / "seeker" / "ckpt-000000070.pt")
    assert crossplay.source_of(run, "hider", "initial") == "initial"
    with pytest.raises(ValueError, match=r"kept: \[6\]"):
        crossplay.source_of(run, "hider", "70")
    with pytest.raises(ValueError, match="expected a number"):
        crossplay.source_of(run, "hider", "v6")


def test_the_command_is_the_srl_evaluate_line_of_the_cell(run):
    command = crossplay.command_of(run, 512, 32, {"seeker": "initial", "hider": "/r/ckpt-000000006.pt"}, False)
    assert shlex.split(command) == ["srl", "evaluate", str(run), "--episodes", "512", "--envs", "32", "--agents",
                                    "seeker=initial", "hider=/r/ckpt-000000006.pt"]
    assert shlex.split(crossplay.command_of(run, 8, 2, {"seeker": "latest"}, True))[-1] == "--deterministic"


def test_the_table_has_a_row_per_version_of_one_side_and_a_column_per_version_of_the_other():
    cells = {("initial", "6"): (-6.64, 5.01), ("initial", "70"): (-28.1, 4.7),
             ("194", "6"): (1.25, 5.2), ("194", "70"): (21.94, 5.44)}
    assert crossplay.table(("seeker", ["initial", "194"]), ("hider", ["6", "70"]), cells).splitlines() == [
        "| seeker \\ hider | 6 | 70 |",
        "|---|---|---|",
        "| initial | -6.6 ± 5.0 | -28.1 ± 4.7 |",
        "| 194 | +1.2 ± 5.2 | +21.9 ± 5.4 |",
    ]
