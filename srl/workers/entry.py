"""Process entry point for every worker, whatever launched it."""

from __future__ import annotations

import ctypes
import faulthandler
import logging
import os
import signal
import sys
from pathlib import Path

import torch

from srl.api.registry import WORKERS
from srl.api.run_paths import RunPaths
from srl.api.worker import HUNG_SIGNAL, WorkerSpec
from srl.streams.context import ContextSpec
from srl.streams.link import allow_many_connections
from srl.workers.base import SHIPPED_LOG
from srl.workers.seeding import seed_process, worker_seed
from srl.workers.threads import compute_threads


def _die_with_parent() -> None:
    """Ask Linux to SIGTERM us when our parent dies, so a killed launcher leaves no orphans."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _redirect_output(run_dir: str, name: str) -> None:
    paths = RunPaths(run_dir)
    paths.logs.mkdir(parents=True, exist_ok=True)
    fd = os.open(paths.log(name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, force=True,
                        format=f"%(asctime)s {name} %(levelname)s %(message)s")


def run_worker(spec: WorkerSpec, context: ContextSpec, own_process: bool = True) -> int:
    """Run one worker until the controller stops it (returns 0) or it fails (1).

    `own_process`: the worker owns its process (the local launcher): it takes over signals
    and stdout. Inside a cluster launcher's actor, the launcher's runtime owns those.
    """
    if own_process:
        # Ctrl-C reaches the whole process group; the controller alone decides how to stop.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _die_with_parent()
    if own_process:
        _redirect_output(spec.run_dir, spec.name)
        # The controller asks a hung worker for its stacks before it kills it: the log then
        # shows where it was stuck.
        faulthandler.register(HUNG_SIGNAL, all_threads=True)
    else:
        # On a cluster the run directory lives on the driver's machine: log lines travel
        # with the heartbeats and the controller writes them into logs/<worker>.log there.
        logging.basicConfig(level=logging.INFO, handlers=[SHIPPED_LOG], force=True,
                            format=f"%(asctime)s {spec.name} %(levelname)s %(message)s")
    # Simulators that write files into the working directory (VizDoom's config, for one)
    # write them inside the run directory, never into the user's.
    ctx = context.build()
    allow_many_connections()
    workdir = RunPaths(spec.run_dir).workdir if own_process else Path(ctx.ipc_dir) / "workdir"
    workdir.mkdir(parents=True, exist_ok=True)
    os.chdir(workdir)
    compute_threads(spec.placement.get("threads", 1))  # see `Placement.threads`
    # Before the worker builds anything random (its policy's initial weights, its envs).
    seed_process(worker_seed(spec.seed, spec.group, spec.index, spec.generation))
    if spec.placement.get("nice"):
        os.nice(spec.placement["nice"])
    # Here, before the worker opens its first socket (zmq starts its threads then): Linux sets the
    # policy per thread, and a new thread inherits its creator's.
    idle = bool(spec.placement.get("idle")) and hasattr(os, "SCHED_IDLE")
    if idle:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    worker = WORKERS.resolve(spec.kind)(spec, ctx)
    if own_process:
        signal.signal(signal.SIGTERM, lambda *_: worker.request_stop())
    logging.info("starting %s (pid %d, nice %d%s, %d torch threads)", spec.name, os.getpid(), os.nice(0),
                 ", idle" if idle else "", torch.get_num_threads())
    code = worker.run()
    logging.info("%s exits with status %d", spec.name, code)
    return code
