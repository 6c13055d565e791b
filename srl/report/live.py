"""`srl top RUN`: a live terminal view of a running run, drawn from its run directory.

The controller rewrites `status.json` about once a second (every worker's row and the latest
stats it sent) and appends a line to `metrics.jsonl` at the same pace (fps, mean return,
policy version, elapsed). A frame is those two files read once: a header, the graph's
streams and one row per worker. Nothing is sent to the run, so watching costs it nothing.

    frame = read_frame(run_dir)          # the two files, as they are now
    console.print(render(frame))         # `--once`
    watch(run_dir, console)              # redraw until the run stops or Ctrl-C
"""

from __future__ import annotations

import json
import os
import string
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from srl.api.run_paths import RunPaths

#: The columns made from a worker's own stats. Each part is a format string over stat names
#: and shows only when the worker reports all of them, so a kind is described by what it
#: reports, never by its name: a user's kind that reports `latency_ms` or `queue` fills these too.
STAT_COLUMNS: dict[str, tuple[str, ...]] = {
    # An actor's request-to-reply time per inference call; a policy worker's time from its
    # first request to its last answer per batch; a trainer's time per training step.
    "latency": ("rtt {inference_ms:.2f} ms", "batch {batch_ms:.2f} ms", "step {step_ms:.0f} ms",
                "{latency_ms:.2f} ms"),
    # Trajectories an actor has sent and the trainer not yet taken (out of its credits), and
    # the share of time it waited for credit; requests a policy worker batches together;
    # trajectories a trainer holds toward its next step.
    "queue": ("{samples_in_flight}/{sample_slots} in flight", "blocked {blocked_frac:.0%}",
              "{requests_per_batch:.1f} req/batch", "{sample_queue} queued", "{queue}",
              # A replay buffer: what it holds, in how much memory, and the batches it sends.
              "{held_steps:,}/{capacity:,} steps", "{memory_mb:,.0f} MB", "{batches_out_per_s:,.0f} batches/s"),
    # How many versions behind the trainer's policy its samples were, and samples past the bound: dropped, or
    # kept by an algorithm that corrects for staleness.
    "staleness": ("lag {version_lag:.2f}", "dropped {dropped_stale:,}", "kept {kept_stale:,}"),
}

#: status.json older than this means the controller has stopped writing it (it writes ~1/s).
STALE_STATUS_S = 5.0


@dataclass
class Frame:
    """What one redraw shows: status.json, the newest metrics.jsonl line, and the status file's age."""

    status: dict[str, Any]
    metrics: dict[str, Any]
    status_age_s: float


def last_line(path: Path, tail_bytes: int = 65536) -> dict[str, Any]:
    """The last complete JSON line of `path` ({} if none), reading only the file's tail."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(f.tell() - tail_bytes, 0))
            lines = f.read().splitlines()
    except FileNotFoundError:
        return {}
    for line in reversed(lines):
        try:
            return json.loads(line)
        except ValueError:
            continue  # a line the controller is still writing
    return {}


def read_frame(run_dir: str | Path) -> Frame | None:
    """The run as it is now, or None while it has not written status.json yet."""
    run_dir = Path(run_dir)
    try:
        text = RunPaths(run_dir).status.read_text()
        age = time.time() - RunPaths(run_dir).status.stat().st_mtime
        status = json.loads(text)
    except (FileNotFoundError, ValueError):
        return None
    return Frame(status, last_line(RunPaths(run_dir).metrics), age)


def _cell(formats: tuple[str, ...], stats: dict[str, Any]) -> str:
    parts = []
    for fmt in formats:
        names = [field for _, field, _, _ in string.Formatter().parse(fmt) if field]
        if all(stats.get(name) is not None for name in names):
            parts.append(fmt.format(**stats))
    return ", ".join(parts) or "-"


def _header(frame: Frame) -> Text:
    status, metrics = frame.status, frame.metrics
    ret = metrics.get("episode_return_mean")
    text = Text.assemble(
        ("run ", "dim"), (str(status.get("run_id")), "bold"), ("  state ", "dim"),
        (str(status.get("state")), "bold green" if status.get("state") == "running" else "bold"),
        ("  env steps ", "dim"), f"{int(status.get('env_steps') or 0):,}",
        ("  fps ", "dim"), f"{float(metrics.get('fps') or 0):,.0f}",
        ("  return ", "dim"), "-" if ret is None else f"{ret:.2f}",
        ("  version ", "dim"), str(metrics.get("policy_version", "-")),
        ("  elapsed ", "dim"), f"{float(metrics.get('time_s') or 0):.1f} s")
    if status.get("state") != "stopped" and frame.status_age_s > STALE_STATUS_S:
        text.append(f"  (status.json not updated for {frame.status_age_s:.0f} s: is the controller alive?)",
                    "bold red")
    return text


def _streams(status: dict[str, Any]) -> Text:
    streams = (status.get("graph") or {}).get("streams", {})
    return Text("\n".join(f"stream {name} ({s['kind']}): {', '.join(s['producers'])} -> {', '.join(s['consumers'])}"
                          for name, s in streams.items()), style="dim")


def _workers(status: dict[str, Any]) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("name", "kind", "state", "fps", "restarts", "heartbeat"):
        table.add_column(column, justify="right" if column in ("fps", "restarts", "heartbeat") else "left")
    for column in STAT_COLUMNS:
        table.add_column(column)
    for w in status.get("workers", []):
        stats = {**w, **(w.get("stats") or {})}
        age = w.get("heartbeat_age_s")
        state = w.get("state", "-")
        table.add_row(w["name"], w["kind"], Text(state, "green" if state == "running" else "yellow"),
                      f"{float(w.get('fps') or 0):,.0f}", str(w.get("restarts", 0)),
                      "-" if age is None else f"{age:.1f} s",
                      *(_cell(formats, stats) for formats in STAT_COLUMNS.values()))
    return table


def render(frame: Frame) -> RenderableType:
    """One frame: the header line, the streams, the workers' table."""
    return Group(_header(frame), _streams(frame.status), _workers(frame.status))


def _waiting(run_dir: Path) -> Text:
    return Text(f"waiting for {RunPaths(run_dir).status} ...", style="dim")


def watch(run_dir: str | Path, console: Console, refresh_s: float = 1.0) -> int:
    """Redraw every `refresh_s` until the run's state is "stopped" (the final frame stays on
    screen) or Ctrl-C, which leaves only the viewer: the run goes on. Returns an exit code."""
    run_dir = Path(run_dir)
    frame = read_frame(run_dir)
    try:
        with Live(render(frame) if frame else _waiting(run_dir), console=console, auto_refresh=False) as live:
            while frame is None or frame.status.get("state") != "stopped":
                time.sleep(refresh_s)
                frame = read_frame(run_dir) or frame
                live.update(render(frame) if frame else _waiting(run_dir), refresh=True)
    except KeyboardInterrupt:
        pass
    return 0
