"""What a run shows of itself: the live progress line and `status.json` (read by `srl status`)."""

from __future__ import annotations

import os
from typing import Any

from srl.launch.supervision import WorkerState


def worker_row(worker: WorkerState, now: float) -> dict[str, Any]:
    """One worker as `srl status --json` lists it."""
    stats = worker.stats
    return {"name": worker.spec.name, "kind": worker.spec.kind, "group": worker.spec.group, "pid": worker.pid,
            "host": worker.host, "state": worker.state, "fps": round(float(stats.get("fps", 0.0)), 1),
            "restarts": worker.restarts,
            #: The port it waits on ("": working), as its last heartbeat said.
            "waiting_on": worker.waiting,
            #: Seconds its progress stat had stood still (while not waiting) at its last heartbeat.
            "progress_still_s": (round(worker.last_heartbeat - worker.moved_at, 2)
                                 if worker.progress_stat and worker.last_heartbeat else None),
            "heartbeat_age_s": round(now - worker.last_heartbeat, 2) if worker.last_heartbeat else None,
            "endpoints": worker.endpoints, "dropped": stats.get("dropped", 0),
            #: Messages its links turned away, by reason (oversized, bad_tag, garbage, wrong_stream,
            #: replayed), and how often a flood made a receive stop early (deferred).
            "rejected": stats.get("rejected") or {},
            "mean_batch": stats.get("mean_batch"), "restart_latency_s": worker.restart_latency_s,
            "param_digest": stats.get("param_digest"), "policy_version": stats.get("policy_version"),
            #: A data-parallel trainer's weight digests at its last versions (version -> digest).
            **({"param_digests": stats["param_digests"]} if stats.get("param_digests") else {}),
            "trained_steps": stats.get("trained_steps"),
            "streams": {port: end.transport for port, end in worker.spec.streams.items()},
            #: Whatever else the worker reports (a user's kind shows its own numbers here).
            "stats": {k: v for k, v in stats.items() if isinstance(v, (int, float, str, bool)) or v is None}}


def status_document(run_id: str, state: str, launcher: str, private_dir: str, env_steps: int,
                    graph: dict[str, Any], workers: list[WorkerState], now: float) -> dict[str, Any]:
    return {"run_id": run_id, "state": state, "controller_pid": os.getpid(), "private_dir": private_dir,
            "launcher": launcher, "env_steps": env_steps, "graph": graph,
            "workers": [worker_row(w, now) for w in workers]}


class Progress:
    """One live line: env steps, fps, mean return, policy version, elapsed."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        from rich.console import Console

        self.console = Console(stderr=True)

    def show(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        ret = record["episode_return_mean"]
        self.console.print(
            f"env_steps {record['env_steps']:>10,}  fps {record['fps']:>9,.0f}  "
            f"return {'-' if ret is None else f'{ret:9.2f}'}  version {record['policy_version']:>5}  "
            f"{record['time_s']:7.1f} s", highlight=False)
