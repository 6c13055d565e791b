"""Cross-play grid of a run of two policies: each kept version of one side against each of the other's.

Each cell is one `srl evaluate` (the same `srl.evaluate.evaluate` call, the same default seed),
and the grid prints as a markdown table of the scored return ± its standard error, rows one
side's versions and columns the other's, followed by the command that gives each cell.

    python benchmarks/crossplay.py RUN --list                           # the versions each policy kept
    python benchmarks/crossplay.py RUN --rows seeker initial 70 194 --columns hider initial 70 195 \\
        --episodes 512 --envs 32 --json grid.json

A side is a policy name, which is also the prefix of its agents' ids (`seeker` for seeker_0,
seeker_1), then its versions: a checkpoint's version number (`checkpoints/<policy>/ckpt-<version>.pt`)
or a source `srl evaluate` takes by name (`initial`, `latest`, `random`).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from srl.evaluate import SOURCES, evaluate
from srl.learn import checkpoint


def kept_versions(run_dir: Path, policy: str) -> list[int]:
    """The versions of `policy` that the run kept a checkpoint of, oldest first."""
    return checkpoint.versions(run_dir / "checkpoints" / policy)


def source_of(run_dir: Path, policy: str, version: str) -> str:
    """What `srl evaluate --agents POLICY=...` takes for `version`: a named source, or the checkpoint's path."""
    if version in SOURCES:
        return version
    if not version.isdigit():
        raise ValueError(f"version {version!r}: expected a number or one of {', '.join(SOURCES)}")
    path = checkpoint.path_of(run_dir / "checkpoints" / policy, int(version))
    if not path.is_file():
        raise ValueError(f"{policy} kept no version {version}; kept: {kept_versions(run_dir, policy)}")
    return str(path)


def command_of(run_dir: Path, episodes: int, envs: int, agents: dict[str, str], deterministic: bool) -> str:
    """The `srl evaluate` command line that plays one cell."""
    words = ["srl", "evaluate", str(run_dir), "--episodes", str(episodes), "--envs", str(envs), "--agents",
             *(f"{prefix}={source}" for prefix, source in agents.items())]
    return shlex.join(words + (["--deterministic"] if deterministic else []))


def table(rows: tuple[str, list[str]], columns: tuple[str, list[str]], cells: dict[tuple[str, str], Any]) -> str:
    """A markdown table of `cells[row_version, column_version]` = (mean, standard error)."""
    (row_side, row_versions), (column_side, column_versions) = rows, columns
    lines = [f"| {row_side} \\ {column_side} | " + " | ".join(column_versions) + " |",
             "|---" * (len(column_versions) + 1) + "|"]
    for r in row_versions:
        lines.append(f"| {r} | " + " | ".join(f"{cells[r, c][0]:+.1f} ± {cells[r, c][1]:.1f}"
                                             for c in column_versions) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--rows", nargs="+", metavar="POLICY VERSION", help="a policy, then its versions")
    parser.add_argument("--columns", nargs="+", metavar="POLICY VERSION", help="the other policy, then its versions")
    parser.add_argument("--episodes", type=int, default=512, help="episodes per cell")
    parser.add_argument("--envs", type=int, default=32, help="envs stepped together")
    parser.add_argument("--deterministic", action="store_true")
    parser.add_argument("--list", action="store_true", help="print the versions each policy kept, and stop")
    parser.add_argument("--json", type=Path, help="also write every cell's evaluation, with its command")
    args = parser.parse_args()
    run_dir = args.run.resolve()
    if args.list:
        for policy_dir in sorted((run_dir / "checkpoints").iterdir()):
            print(policy_dir.name, *kept_versions(run_dir, policy_dir.name))
        return 0
    if not args.rows or len(args.rows) < 2 or not args.columns or len(args.columns) < 2:
        parser.error("--rows and --columns each take a policy and at least one version")
    rows, columns = (args.rows[0], args.rows[1:]), (args.columns[0], args.columns[1:])
    try:
        sources = {(side, v): source_of(run_dir, side, v) for side, versions in (rows, columns) for v in versions}
    except ValueError as exc:
        parser.error(str(exc))
    cells, records, commands = {}, [], []
    for r in rows[1]:
        for c in columns[1]:
            agents = {rows[0]: sources[rows[0], r], columns[0]: sources[columns[0], c]}
            command = command_of(run_dir, args.episodes, args.envs, agents, args.deterministic)
            result = evaluate(run_dir, args.episodes, args.envs, agents, args.deterministic)
            cells[r, c] = (result.return_mean, result.return_stderr)
            records.append({"row": r, "column": c, "command": command, **result.as_dict()})
            commands.append(command)
            print(f"{rows[0]} {r} vs {columns[0]} {c}: {result.return_mean:+.2f} ± {result.return_stderr:.2f}",
                  file=sys.stderr, flush=True)
            if args.json:  # after every cell: a long grid's finished cells survive an interruption
                args.json.write_text(json.dumps({"rows": rows, "columns": columns, "cells": records}, indent=1))
    print(table(rows, columns, cells))
    print()
    print("\n".join(commands))
    return 0


if __name__ == "__main__":
    sys.exit(main())
