"""Run a command on this machine made to behave like a slower, busier one (Linux).

    python benchmarks/slow_box.py --busy-cores 0 --syscall-filters 8 srl bench halfcheetah-ppo --seconds 10

* `--busy-cores 0,1`: a busy loop at nice 0 on each listed core, each in a session of its own
  (so in its own scheduling group, as another user's job is), pinned there. The run keeps the
  other cores' time and shares these.
* `--syscall-filters K`: K seccomp filters of 4,000 BPF instructions each, attached before the
  command starts and inherited by all its processes. Each filter reads a system call argument,
  so the kernel cannot cache its verdict: every system call runs all of them (8 filters make a
  trivial call cost several microseconds instead of a fraction of one), as on a box whose
  kernel entries are dear.
* `--steal F`: on each core, a SCHED_FIFO process runs a busy loop for F of every 10 ms, taking
  that time from everything else there, as a hypervisor stealing time would.
* `--cpu-quota C`: the command and all its processes run in a CPU cgroup of their own capped at
  C cores' worth of time (cgroup v1 `cpu.cfs_quota_us` or v2 `cpu.max`; needs a writable cgroup
  tree, as root in a container usually has), as on a box or container with fewer cores.

It prints what a trivial system call costs before and after, and leaves nothing behind.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import struct
import sys
import time
from pathlib import Path

PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
BPF_LD_W_ABS, BPF_RET_K, SECCOMP_RET_ALLOW = 0x20, 0x06, 0x7FFF0000
FILTER_LENGTH = 4000
ARG0_OFFSET = 16  # struct seccomp_data: nr, arch, instruction_pointer (8 bytes), args[0]


def attach_syscall_filters(count: int) -> None:
    """`count` filters that each load a syscall argument FILTER_LENGTH times, then allow the call."""
    libc = ctypes.CDLL(None, use_errno=True)
    program = [(BPF_LD_W_ABS, 0, 0, ARG0_OFFSET)] * FILTER_LENGTH + [(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW)]
    raw = b"".join(struct.pack("HBBI", *insn) for insn in program)
    buffer = ctypes.create_string_buffer(raw, len(raw))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = SockFprog(len(program), ctypes.cast(buffer, ctypes.c_void_p))
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0):
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    for _ in range(count):
        if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0):
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


def syscall_cost_us(calls: int = 20000) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        os.getppid()
    return (time.perf_counter() - start) / calls * 1e6


def _busy_loop(core: int) -> None:
    os.setsid()
    os.sched_setaffinity(0, {core})
    while True:
        pass


def _stealer(core: int, fraction: float, period_s: float) -> None:
    os.sched_setaffinity(0, {core})
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    due = time.monotonic() + period_s * core / (os.cpu_count() or 1)  # cores out of step
    while True:
        time.sleep(max(0.0, due - time.monotonic()))
        end = time.monotonic() + fraction * period_s
        while time.monotonic() < end:
            pass
        due += period_s


CGROUP_V1 = Path("/sys/fs/cgroup/cpu")
CGROUP_V2 = Path("/sys/fs/cgroup")


def make_quota_cgroup(cores: float) -> Path:
    """A new CPU cgroup capped at `cores` cores' worth of time per 100 ms period."""
    period = 100_000
    quota = max(1000, int(cores * period))
    if (CGROUP_V1 / "cpu.cfs_quota_us").exists():
        group = CGROUP_V1 / f"srl-slow-box-{os.getpid()}"
        group.mkdir()
        (group / "cpu.cfs_period_us").write_text(str(period))
        (group / "cpu.cfs_quota_us").write_text(str(quota))
    else:
        group = CGROUP_V2 / f"srl-slow-box-{os.getpid()}"
        group.mkdir()
        (group / "cpu.max").write_text(f"{quota} {period}")
    return group


def remove_cgroup(group: Path, wait_s: float = 10.0) -> None:
    """Remove the cgroup once its last process is gone: a process that has just exited stays a
    member for a moment (EBUSY). Fails, and says so, if one of the command's outlives the wait."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            group.rmdir()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def _fork(target, *args) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            target(*args)
        finally:
            os._exit(0)
    return pid


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--busy-cores", type=lambda s: [int(c) for c in s.split(",") if c], default=[])
    parser.add_argument("--syscall-filters", type=int, default=0)
    parser.add_argument("--steal", type=float, default=0.0)
    parser.add_argument("--cpu-quota", type=float, default=None, metavar="CORES")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    helpers = [_fork(_busy_loop, core) for core in args.busy_cores]
    if args.steal > 0:
        helpers += [_fork(_stealer, core, args.steal, 0.01) for core in range(os.cpu_count() or 1)]
    group = make_quota_cgroup(args.cpu_quota) if args.cpu_quota else None
    try:
        before = syscall_cost_us()
        if args.syscall_filters:
            attach_syscall_filters(args.syscall_filters)
        print(f"slow_box: a system call costs {syscall_cost_us():.2f} us (was {before:.2f}); busy loops on cores "
              f"{args.busy_cores}; {args.steal:.0%} of each core stolen"
              f"{f'; CPU quota {args.cpu_quota} cores' if group else ''}", file=sys.stderr, flush=True)
        child = os.fork()
        if child == 0:
            if group is not None:
                (group / "cgroup.procs").write_text(str(os.getpid()))
            os.execvp(args.command[0], args.command)
        return os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
    finally:
        for pid in helpers:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        if group is not None:
            remove_cgroup(group)


if __name__ == "__main__":
    sys.exit(main())
