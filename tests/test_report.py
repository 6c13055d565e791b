"""`srl plot`, `srl runs`, `srl configs`: the user's view of run directories, on fake runs."""

from __future__ import annotations

import json
import math
import os
import re
import struct
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest
import yaml

pytest.importorskip("matplotlib")

from matplotlib.collections import PolyCollection  # noqa: E402

from srl.cli import main  # noqa: E402
from srl.report import configs as report_configs  # noqa: E402
from srl.report.plot import band, group_curves, load_curves, make_figure, smooth  # noqa: E402
from srl.report.runs import elapsed, find_runs, lookup, run_info, series  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
STEPS = 10_000  # env steps between two reports


def _curve(seed: int, points: int, scale: float = 500.0) -> list[float]:
    """A learning curve, shifted per seed: seed s sits 10·(s-2) above the middle one."""
    return [scale * (1 - math.exp(-i / 8)) + 10.0 * (seed - 2) for i in range(1, points + 1)]


def write_run(path: Path, name: str, seed: int, returns: list[float | None], *, state: str = "stopped",
              summary: dict | None = None, pid: int | None = None, config: dict | None = None) -> Path:
    """A run directory as the controller leaves it (config.yaml, metrics.jsonl, status.json, summary.json)."""
    path.mkdir(parents=True)
    data = {"name": name, "seed": seed, "env": {"type": "gym", "id": "CartPole-v1"},
            "algorithm": {"type": "ppo", "args": {"lr": 0.001}}, "stop": {"episode_return": 475}}
    (path / "config.yaml").write_text(yaml.safe_dump({**data, **(config or {})}, sort_keys=False))
    with open(path / "metrics.jsonl", "w") as f:
        f.write(json.dumps({"time_s": 0.5, "env_steps": 0, "episode_return_mean": None, "train": {}}) + "\n")
        for i, ret in enumerate(returns, 1):
            f.write(json.dumps({"time_s": 0.5 + i, "env_steps": i * STEPS, "episode_return_mean": ret,
                                "train": {"value_loss": 100.0 / i, "entropy": None}}) + "\n")
    env_steps = len(returns) * STEPS
    (path / "status.json").write_text(json.dumps({"run_id": f"r{seed}", "state": state, "env_steps": env_steps,
                                                  "controller_pid": pid or 999_999_999, "workers": []}))
    if summary is not None:
        (path / "summary.json").write_text(json.dumps({"env_steps": env_steps, "wall_time_s": len(returns) + 1.0,
                                                       "stop_reason": "env_steps reached 1", **summary}))
    return path


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """runs/: three seeds of cartpole-ppo (of 20, 22 and 24 reports) and one run of pendulum-ppo."""
    root = tmp_path / "runs"
    for seed, points in ((1, 20), (2, 22), (3, 24)):
        write_run(root / "cartpole-ppo" / f"seed{seed}", "cartpole-ppo", seed, _curve(seed, points),
                  summary={"stop_reason": "episode_return_mean 480.0 >= 475.0"})
    write_run(root / "pendulum-ppo" / "20250101-000000", "pendulum-ppo", 1, _curve(2, 15, scale=-300.0),
              summary={"stop_reason": "env_steps reached 150000"})
    return root


# ------------------------------------------------------------------ the band and the curves
def test_band_is_the_mean_between_the_lowest_and_highest_seed():
    curves = [([0, 10], [0, 10]), ([0, 10], [2, 12]), ([0, 5, 10], [4, 9, 14])]
    b = band(curves, "minmax", points=3)
    np.testing.assert_allclose(b.x, [0, 5, 10])
    np.testing.assert_allclose(b.mean, [2, 7, 12])
    np.testing.assert_allclose(b.lower, [0, 5, 10])
    np.testing.assert_allclose(b.upper, [4, 9, 14])
    s = band(curves, "std", points=3)
    np.testing.assert_allclose(s.mean, [2, 7, 12])
    np.testing.assert_allclose(s.upper - s.mean, [math.sqrt(8 / 3)] * 3)
    np.testing.assert_allclose(s.mean - s.lower, [math.sqrt(8 / 3)] * 3)


def test_band_spans_only_the_x_range_every_seed_reaches_and_interpolates():
    # x from 2 (the latest first point) to 8 (the earliest last point); y = x, 2x, and 0 then 30.
    b = band([([0, 8], [0, 8]), ([2, 10], [4, 20]), ([0, 10], [0, 30])], points=4)
    np.testing.assert_allclose(b.x, [2, 4, 6, 8])
    ys = np.array([[2, 4, 6, 8], [4, 8, 12, 16], [6, 12, 18, 24]])
    np.testing.assert_allclose(b.mean, ys.mean(axis=0))
    np.testing.assert_allclose(b.lower, ys.min(axis=0))
    np.testing.assert_allclose(b.upper, ys.max(axis=0))
    with pytest.raises(ValueError, match="no x range"):
        band([([0, 1], [0, 1]), ([2, 3], [0, 1])])
    with pytest.raises(ValueError, match="band must be"):
        band([([0, 1], [0, 1])], "iqr")


def test_smooth_is_a_trailing_moving_average():
    np.testing.assert_allclose(smooth([1, 2, 3, 4], 2), [1, 1.5, 2.5, 3.5])
    np.testing.assert_allclose(smooth([3, 6, 9, 12], 3), [3, 4.5, 6, 9])
    np.testing.assert_allclose(smooth([1, 5], 1), [1, 5])


def test_series_reads_nested_metrics_skips_nulls_and_follows_resumes():
    records = [
        {"time_s": 1.0, "env_steps": 0, "episode_return_mean": None, "train": {}},
        {"time_s": 2.0, "env_steps": 100, "episode_return_mean": 10.0, "train": {"value_loss": 4.0}},
        {"time_s": 3.0, "env_steps": 200, "episode_return_mean": 20.0, "train": {"value_loss": float("nan")}},
        {"time_s": 4.0, "env_steps": 300, "episode_return_mean": 30.0, "train": {"value_loss": 2.0}},
        # resumed from the checkpoint at 150 env steps: the wall clock starts again at 0
        {"time_s": 1.5, "env_steps": 150, "episode_return_mean": 25.0, "train": {"value_loss": 1.0}},
        {"time_s": 2.5, "env_steps": 250, "episode_return_mean": 35.0, "train": {"value_loss": 0.5}},
    ]
    assert lookup(records[1], "train/value_loss") == 4.0 and lookup(records[0], "train/value_loss") is None
    assert series(records, "episode_return_mean") == ([100, 150, 250], [10.0, 25.0, 35.0])
    assert series(records, "train/value_loss", "time_s") == ([2.0, 4.0, 5.5, 6.5], [4.0, 2.0, 1.0, 0.5])
    assert elapsed(records) == [1.0, 2.0, 3.0, 4.0, 5.5, 6.5]


def test_seeds_of_one_config_form_one_group_and_other_settings_another(tmp_path):
    for seed in (1, 2):
        write_run(tmp_path / f"cp{seed}", "cartpole-ppo", seed, _curve(seed, 5))
    # A config.yaml of an older srl lacks a setting: it still counts as a seed of the same config.
    write_run(tmp_path / "cp3", "cartpole-ppo", 3, _curve(3, 5), config={"actors": {"synchronous": False}})
    write_run(tmp_path / "acro", "cartpole-ppo", 1, _curve(1, 5), config={"env": {"type": "gym", "id": "Acrobot-v1"}})
    groups = group_curves(load_curves([tmp_path]))
    assert sorted((g.label, len(g.curves)) for g in groups) == [
        ("cartpole-ppo [env.id=Acrobot-v1]", 1), ("cartpole-ppo [env.id=CartPole-v1] (3 seeds)", 3)]


# ------------------------------------------------------------------ srl plot
def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_figure_draws_a_band_for_the_seeds_and_a_line_for_the_single_run(runs):
    fig = make_figure([runs])
    ax = fig.axes[0]
    handles, labels = ax.get_legend_handles_labels()
    assert labels == ["cartpole-ppo (3 seeds)", "pendulum-ppo"]
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 1, "one band: the three seeds'; none for the single run"
    # The band has the group's colour, and runs from the lowest seed to the highest.
    seeds_line, single_line = handles
    assert np.allclose(bands[0].get_facecolor()[0][:3], _rgb(seeds_line.get_color()))
    assert not np.allclose(_rgb(single_line.get_color()), _rgb(seeds_line.get_color()))
    ys = bands[0].get_paths()[0].vertices[:, 1]
    lowest, highest = _curve(1, 24), _curve(3, 24)
    assert ys.min() == pytest.approx(min(lowest), abs=1e-6)
    assert ys.max() == pytest.approx(highest[19], abs=1e-6)  # the band stops where the shortest seed stops (20)
    # The mean line is the middle seed (seeds sit 10 apart), over the x range all three reach.
    x, y = seeds_line.get_data()
    assert x[0] == pytest.approx(STEPS) and x[-1] == pytest.approx(20 * STEPS)
    np.testing.assert_allclose(y, np.interp(x, np.arange(1, 23) * STEPS, _curve(2, 22)))
    # Every seed is drawn faintly too, in full.
    faint = [line for line in ax.lines if line.get_alpha() and line.get_alpha() < 1]
    assert sorted(len(line.get_xdata()) for line in faint) == [20, 22, 24]
    assert ax.get_xlabel() == "env steps" and ax.get_ylabel() == "episode_return_mean"


def test_figure_of_one_run_has_no_band(runs):
    ax = make_figure([runs / "pendulum-ppo"]).axes[0]
    assert ax.get_legend_handles_labels()[1] == ["pendulum-ppo"]
    assert not [c for c in ax.collections if isinstance(c, PolyCollection)]


def test_srl_plot_writes_a_png(runs, tmp_path, capsys):
    out = tmp_path / "plots" / "returns.png"
    assert main(["plot", str(runs / "cartpole-ppo"), str(runs / "pendulum-ppo" / "20250101-000000"),
                 "--smooth", "3", "-o", str(out)]) == 0
    assert _png_size(out) == (900, 550)
    assert out.stat().st_size > 20_000  # lines, a band, a legend: not a blank image
    assert "wrote" in capsys.readouterr().err
    other = tmp_path / "loss.png"
    assert main(["plot", str(runs), "--metric", "train/value_loss", "--x", "time_s", "--band", "std",
                 "-o", str(other)]) == 0
    assert _png_size(other) == (900, 550)


def test_srl_plot_says_what_is_wrong(runs, tmp_path, capsys):
    out = tmp_path / "x.png"
    assert main(["plot", str(runs), "--metric", "train/nope", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no run has 'train/nope'" in err and "train/value_loss" in err and "episode_return_mean" in err
    assert main(["plot", str(tmp_path / "missing"), "-o", str(out)]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["plot", str(tmp_path / "empty"), "-o", str(out)]) == 2
    assert "holds none" in capsys.readouterr().err
    assert not out.exists()


def test_srl_plot_warns_when_one_short_run_cuts_the_mean_short(runs, tmp_path, capsys):
    write_run(runs / "cartpole-ppo" / "crashed", "cartpole-ppo", 4, _curve(1, 3))
    assert main(["plot", str(runs), "-o", str(tmp_path / "x.png")]) == 0
    err = capsys.readouterr().err
    assert "cartpole-ppo (4 seeds): the mean stops at env_steps 30,000" in err and "crashed" in err


def test_srl_plot_runs_headless(runs, tmp_path):
    """A fresh process with no display and no MPLBACKEND writes the PNG (Agg, no GUI backend)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "MPLBACKEND", "WAYLAND_DISPLAY")}
    out = tmp_path / "headless.png"
    done = subprocess.run([sys.executable, "-m", "srl.cli", "plot", str(runs), "-o", str(out)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert _png_size(out) == (900, 550)


# ------------------------------------------------------------------ srl runs
def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_srl_runs_lists_every_run_with_its_state(runs, capsys, monkeypatch):
    write_run(runs / "cartpole-ppo" / "failed", "cartpole-ppo", 4, _curve(1, 3),
              summary={"stop_reason": "worker actor.0 died with exit code 1", "errors": {"actor.0": "boom"}})
    write_run(runs / "cartpole-ppo" / "died", "cartpole-ppo", 5, _curve(1, 4), state="running", pid=_dead_pid())
    write_run(runs / "cartpole-ppo" / "live", "cartpole-ppo", 6, _curve(1, 6) + [None], state="running",
              pid=os.getpid())
    assert main(["runs", str(runs), "--json"]) == 0
    rows = {Path(r["path"]).name: r for r in json.loads(capsys.readouterr().out)}
    assert sorted(rows) == ["20250101-000000", "died", "failed", "live", "seed1", "seed2", "seed3"]
    assert {name: r["state"] for name, r in rows.items()} == {
        "20250101-000000": "stopped", "died": "died", "failed": "failed", "live": "running",
        "seed1": "stopped", "seed2": "stopped", "seed3": "stopped"}
    seed3 = rows["seed3"]
    assert seed3["config"] == "cartpole-ppo" and seed3["seed"] == 3 and seed3["env_steps"] == 24 * STEPS
    assert seed3["best_return"] == pytest.approx(max(_curve(3, 24)))
    assert seed3["last_return"] == pytest.approx(_curve(3, 24)[-1])
    assert seed3["wall_time_s"] == 25.0 and seed3["stop_reason"] == "episode_return_mean 480.0 >= 475.0"
    pendulum = rows["20250101-000000"]
    assert pendulum["config"] == "pendulum-ppo" and pendulum["best_return"] == pytest.approx(_curve(2, 1, -300.0)[0])
    assert rows["failed"]["errors"] == ["actor.0"]
    assert rows["died"]["stop_reason"] is None and rows["died"]["env_steps"] == 4 * STEPS
    live = rows["live"]  # the last report has no return yet: the last return is the one before
    assert live["last_return"] == pytest.approx(_curve(1, 6)[-1]) and live["wall_time_s"] == 7.5

    monkeypatch.chdir(runs.parent)
    assert main(["runs"]) == 0  # runs/ by default
    table = capsys.readouterr().out
    for text in ("7 runs under runs", "cartpole-ppo", "pendulum-ppo", "runs/cartpole-ppo/seed3", "240,000", "died",
                 "failed", "running", "episode_return_mean 480.0 >= 475.0", "errors: actor.0"):
        assert text in table, text


def test_a_run_directory_is_found_by_itself_and_its_own_folders_are_not_searched(runs):
    run = runs / "cartpole-ppo" / "seed1"
    (run / "checkpoints" / "nested").mkdir(parents=True)
    write_run(run / "workdir" / "stray", "stray", 1, [1.0])
    assert find_runs(run) == [run]
    assert len(find_runs(runs)) == 4
    assert run_info(run).state == "stopped"


def test_srl_runs_on_nothing(tmp_path, capsys):
    assert main(["runs", str(tmp_path)]) == 0
    assert "no runs under" in capsys.readouterr().out
    assert main(["runs", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["runs", str(tmp_path / "missing")]) == 1


def test_a_resumed_run_running_again_is_not_taken_for_its_old_summary(runs):
    run = runs / "cartpole-ppo" / "seed1"
    status = json.loads((run / "status.json").read_text())
    os.utime(run / "summary.json", (1_000_000, 1_000_000))  # written by the part before the resume
    (run / "status.json").write_text(json.dumps({**status, "state": "running", "controller_pid": os.getpid()}))
    assert run_info(run).state == "running"
    (run / "status.json").write_text(json.dumps({**status, "state": "running", "controller_pid": _dead_pid()}))
    assert run_info(run).state == "died"


# ------------------------------------------------------------------ srl configs
def test_srl_configs_json_names_env_algorithm_extra_and_reference(capsys):
    assert main(["configs", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    from srl.api.config_files import bundled_configs

    assert sorted(rows) == bundled_configs()
    assert rows["cartpole-ppo"]["env"] == {"type": "gym", "id": "CartPole-v1"}
    assert rows["cartpole-ppo"]["algorithm"] == "ppo" and rows["cartpole-ppo"]["extras"] == []
    assert rows["cartpole-appo"]["algorithm"] == "appo"
    expected = {"pong-ppo": ["atari"], "pong-appo": ["atari"], "halfcheetah-ppo": ["mujoco"],
                "vizdoom-basic-ppo": ["vizdoom"], "spread-mappo": ["pettingzoo"], "football-3v1-mappo": ["football"],
                "hns-mappo": ["mujoco", "pettingzoo"]}
    for name, extras in expected.items():
        assert rows[name]["extras"] == extras, name
    assert rows["vizdoom-basic-ppo"]["env"] == {"type": "vizdoom", "id": "basic"}
    assert "install_football.sh" in rows["football-3v1-mappo"]["install"]
    assert rows["pong-ppo"]["install"] == "pip install -e '.[atari]'"
    for name, row in rows.items():
        assert row["reference"] and row["reference"]["source"].startswith("docs/"), name


def test_extras_exist_in_pyproject_and_follow_the_env():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(report_configs.EXTRA_MODULES) <= set(declared)
    assert report_configs.extras_for({"type": "gym", "id": "Hopper-v5"}) == ["mujoco"]
    assert report_configs.extras_for({"type": "gym", "id": "ALE/Breakout-v5", "backend": "envpool"}) == [
        "atari", "envpool"]
    assert report_configs.extras_for({"type": "gym", "id": "Acrobot-v1"}) == []
    assert report_configs.extras_for({"type": "mypkg.envs:MyEnv"}) == []


def test_reference_results_quote_their_docs():
    """Each reference names a doc, and every number in it is in that doc (the table can't drift
    from the measurements silently)."""
    from srl.api.config_files import bundled_configs

    assert set(report_configs.REFERENCE_RESULTS) <= set(bundled_configs())
    for name, (result, source) in report_configs.REFERENCE_RESULTS.items():
        text = (ROOT / source).read_text()
        assert name in text, f"{source} does not mention {name}"
        for number in re.findall(r"\d[\d,.]*\d|\d", result):
            assert number in text, f"{name}: {number} is not in {source}"


def test_srl_configs_table(capsys):
    assert main(["configs"]) == 0
    out = capsys.readouterr().out
    for text in ("cartpole-ppo", "gym CartPole-v1", "atari ALE/Pong-v5", "mujoco, pettingzoo", "docs/benchmarks.md",
                 "docs/environments.md", "install_football.sh"):
        assert text in out, text


def _rgb(colour) -> np.ndarray:
    from matplotlib.colors import to_rgb

    return np.array(to_rgb(colour))
