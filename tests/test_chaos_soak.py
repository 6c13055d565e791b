"""The chaos soak's report maths (benchmarks/chaos_soak.py), without a run."""

import importlib.util
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "chaos_soak", Path(__file__).resolve().parents[1] / "benchmarks" / "chaos_soak.py")
soak = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = soak  # dataclasses look their module up while the file runs
_spec.loader.exec_module(soak)


def test_growth_compares_the_last_tenth_with_the_first_tenth_after_warm_up():
    flat = [(t, 100.0) for t in range(100)]
    assert soak.growth(flat, warmup_s=0) == 0.0
    leak = [(t, 200.0 if t < 30 else 100.0 + (t - 30)) for t in range(130)]  # warm-up spike, then +1 MB/s
    # after 30 s: 100 samples, first ten 100..109 (mean 104.5), last ten 190..199 (mean 194.5)
    assert soak.growth(leak, warmup_s=30) == pytest.approx(90 / 104.5)
    assert soak.growth([(t, 100.0) for t in range(9)], warmup_s=0) is None  # too few to say


def _snapshot(pid, state, restarts):
    return {"actor.0": {"pid": pid, "state": state, "restarts": restarts}}


def test_a_kill_recovers_only_when_its_slot_runs_again_under_a_new_pid_with_one_more_restart():
    kill = soak.Kill(t=10.0, name="actor.0", kind="actor", pid=7, restarts_before=0)
    snapshots = [(9.0, _snapshot(7, "running", 0)), (11.0, _snapshot(7, "running", 0)),  # not yet noticed
                 (12.0, _snapshot(8, "starting", 1)), (14.0, _snapshot(8, "running", 1))]
    assert soak.recovered_at(kill, snapshots)[0] == 14.0
    assert soak.recovered_at(kill, snapshots[:3]) is None


def test_env_steps_lost_is_the_usual_rate_times_the_window_minus_what_was_counted():
    # 100 steps/s, then nothing for 5 s after a kill at t=40, then 100 steps/s again
    steps = [(t, 100 * min(t, 40) + 100 * max(0, t - 45)) for t in range(100)]
    rates = soak.clean_rates(steps, busy=[(39.0, 55.0)])
    assert [s for s, _ in rates] == [0, 10, 20, 60, 70, 80] and {r for _, r in rates} == {100.0}
    assert soak.steps_lost(40.0, 55.0, steps, soak.usual_rate(40.0, rates)) == pytest.approx(500)
    assert soak.steps_lost(40.0, 120.0, steps, 100.0) is None  # past the last sample
