"""Soak: a long training run, watching every worker's memory.

Runs `srl train CONFIG` for `--minutes` (default 10) with a deliberately slow trainer
option available (`--drop-oldest` to use that backpressure mode), samples each worker's
RSS every few seconds through `srl status --json` PIDs, and reports per worker the RSS
at start (once every worker runs), at the end, and the peak. Bounded queues mean the end
should sit close to the start.

    python benchmarks/soak.py cartpole-ppo --minutes 10
    python benchmarks/soak.py cartpole-ppo --minutes 0.3     # smoke
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil


def rss_by_worker(run_dir: Path) -> dict[str, float]:
    try:
        status = json.loads((run_dir / "status.json").read_text())
    except (OSError, ValueError):
        return {}
    out = {}
    for w in status.get("workers", []):
        try:
            if w["state"] == "running" and w["pid"]:
                out[w["name"]] = psutil.Process(w["pid"]).memory_info().rss / 2**20
        except psutil.Error:
            pass
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_intermixed_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="srl-soak-"))
    run_dir = workdir / "run"
    seconds = args.minutes * 60
    command = [sys.executable, "-m", "srl.cli", "train", args.config, "--run-dir", str(run_dir), *args.overrides,
               f"stop.time_s={seconds}", "stop.episode_return=null", "stop.env_steps=null",
               "log.progress=false", "log.tensorboard=false"]
    process = subprocess.Popen(command, cwd=workdir, start_new_session=True, stdout=subprocess.DEVNULL)
    start: dict[str, float] = {}
    last: dict[str, float] = {}
    peak: dict[str, float] = {}
    try:
        while process.poll() is None:
            sample = rss_by_worker(run_dir)
            if sample and not start and len(sample) == len(json.loads((run_dir / "status.json").read_text())["workers"]):
                start = dict(sample)
            for name, mb in sample.items():
                peak[name] = max(peak.get(name, 0.0), mb)
            if sample:
                last = sample
            time.sleep(min(args.every, max(seconds / 20, 0.2)))
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
            process.wait(timeout=30)
    summary = json.loads((run_dir / "summary.json").read_text())
    shutil.rmtree(workdir, ignore_errors=True)
    print(f"{'worker':<12}{'RSS start MB':>14}{'RSS end MB':>12}{'peak MB':>10}")
    for name in sorted(peak):
        print(f"{name:<12}{start.get(name, float('nan')):>14.1f}{last.get(name, float('nan')):>12.1f}{peak[name]:>10.1f}")
    print(f"env steps {summary['env_steps']:,} in {summary['wall_time_s']:.0f} s ({summary['fps']:,.0f}/s)")
    result = {"start_mb": start, "end_mb": last, "peak_mb": peak, "summary": summary}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
