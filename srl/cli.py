"""The `srl` command: train, sweep, status, bench, evaluate, export, configs, runs, plot."""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from srl.api.config import ConfigError, ExperimentConfig
from srl.api.run_paths import RunPaths
from srl.measure import MeasurementError
from srl.prepare import prepare

EXIT_CONFIG = 2
#: The exit status of a command stopped by Ctrl-C, as the shell gives one killed by SIGINT.
EXIT_INTERRUPTED = 130


def _train(args: argparse.Namespace) -> int:
    overrides = list(args.overrides)
    config_name = args.config
    if config_name and "=" in config_name:
        overrides.insert(0, config_name)
        config_name = None
    if not config_name and not args.resume:
        print("srl: config error: train: give a CONFIG (bundled name or YAML path) or --resume DIR", file=sys.stderr)
        return EXIT_CONFIG
    from srl.launch.run_dir import RunInUse
    from srl.run import RunDirUnwritable, RunExists, launch

    try:
        run, run_dir, controller = launch(config_name, overrides, args.run_dir, args.resume)
    except RunExists as exc:
        print(f"srl: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except ConfigError as exc:  # includes settings only checkable by starting them (a W&B login)
        print(f"srl: config error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except MeasurementError as exc:  # `auto`'s measurements could not be made
        print(f"srl: train: the layout's measurements failed: {exc}", file=sys.stderr)
        return 1
    except RunInUse as exc:  # refused before anything in the directory was written
        print(f"srl: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except RunDirUnwritable as exc:  # a full disk, a read-only file system: no run can start there
        print(f"srl: {exc}", file=sys.stderr)
        return 1
    print(f"srl: run directory {run_dir}", file=sys.stderr)
    if run.previous is not None:
        for line in _changes(run.previous, run.config):
            print(f"srl: resuming with {line}", file=sys.stderr)
    try:
        summary = controller.run()
    except ConfigError as exc:  # settings only checkable on the cluster (a placement no node can take)
        print(f"srl: config error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    print(json.dumps(summary, indent=1))
    return 0 if not summary.get("errors") else 1


def _leaves(data: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted path, value) for every leaf of nested dicts."""
    if isinstance(data, dict) and data:
        return [item for key, value in data.items() for item in _leaves(value, f"{prefix}{key}.")]
    return [(prefix.rstrip("."), data)]


def _changes(before: ExperimentConfig, after: ExperimentConfig) -> list[str]:
    """`path: old -> new` for every field that differs between two configs."""
    old, new = dict(_leaves(before.model_dump(mode="json"))), dict(_leaves(after.model_dump(mode="json")))
    return [f"{path}: {old.get(path)!r} -> {new.get(path)!r}" for path in sorted(old.keys() | new.keys())
            if old.get(path) != new.get(path)]


def _status(args: argparse.Namespace) -> int:
    from srl.launch.run_dir import read_status

    try:
        status = read_status(args.run_dir)
    except FileNotFoundError as exc:
        print(f"srl: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(status, indent=1))
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 200)
    graph = status.get("graph") or {}
    for name, stream in graph.get("streams", {}).items():
        console.print(f"stream {name} ({stream['kind']}): {', '.join(stream['producers'])} -> "
                      f"{', '.join(stream['consumers'])}", highlight=False)
    table = Table(title=f"run {status['run_id']} ({status['state']}, {status['env_steps']:,} env steps)")
    for column in ("name", "kind", "pid", "host", "state", "fps", "restarts", "heartbeat_age_s", "streams", "rejected"):
        table.add_column(column)
    for w in status["workers"]:
        streams = ", ".join(f"{k}:{v}" for k, v in w.get("streams", {}).items())
        rejected = " ".join(f"{reason} {n:,}" for reason, n in sorted((w.get("rejected") or {}).items()))
        table.add_row(w["name"], w["kind"], str(w["pid"]), w["host"], w["state"], f"{w['fps']:,.0f}",
                      str(w["restarts"]), str(w.get("heartbeat_age_s")), streams, rejected or "-")
    console.print(table)
    if status.get("population"):  # population-based training: each member and its settings now
        members = Table(title="population")
        for column in ("member", "env_steps", "return", "version", "hyper-parameters", "copies", "last copied"):
            members.add_column(column)
        for m in status["population"]:
            ret = m.get("episode_return_mean")
            hps = " ".join(f"{k}={v:.4g}" for k, v in (m.get("hyperparameters") or {}).items())
            members.add_row(m["member"], f"{m['env_steps']:,}", "-" if ret is None else f"{ret:.1f}",
                            str(m.get("policy_version")), hps or "-", str(m.get("copies", 0)),
                            m.get("copied_from") or "-")
        console.print(members)
    for event in status.get("nodes") or []:  # an elastic run's cluster: nodes that left or joined
        added = f", actors added: {event['actors_added']}" if event.get("actors_added") is not None else ""
        console.print(f"node {event['node']} {event['event']} at {event['at_s']:.1f} s{added}", highlight=False)
    for w in status["workers"]:  # replay buffers: what they hold and in how much memory
        s = w.get("stats") or {}
        if {"held_steps", "capacity", "memory_mb"} <= s.keys():
            console.print(f"{w['name']}: holds {s['held_steps']:,} of {s['capacity']:,} env steps in "
                          f"{s['memory_mb']:,.1f} MB; {s.get('samples_in_per_s', 0):,.0f} env steps/s in, "
                          f"{s.get('batches_out_per_s', 0):,.0f} batches/s out", highlight=False)
    return 0


def _top(args: argparse.Namespace) -> int:
    from rich.console import Console

    from srl.report.live import read_frame, render, watch

    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        print(f"srl: {run_dir} is not a directory", file=sys.stderr)
        return 1
    console = Console(width=None if sys.stdout.isatty() else 200)
    if not args.once:
        return watch(run_dir, console, args.interval)
    frame = read_frame(run_dir)
    if frame is None:
        print(f"srl: no status.json in {run_dir} (has the run started?)", file=sys.stderr)
        return 1
    console.print(render(frame))
    return 0


def _bench(args: argparse.Namespace) -> int:
    try:
        config = prepare(args.config, args.overrides).config
        if config.policies:
            raise ConfigError("policies: srl bench measures one policy's trainer; a config of several policies "
                              "is not benchmarked yet")
    except ConfigError as exc:
        print(f"srl: config error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except MeasurementError as exc:  # `auto`'s measurements could not be made
        print(f"srl: bench: the layout's measurements failed: {exc}", file=sys.stderr)
        return 1
    from srl.bench import print_table, run_bench

    try:
        result = run_bench(config, args.seconds, args.cores)
    except MeasurementError as exc:
        print(f"srl: bench: a measurement failed: {exc}", file=sys.stderr)
        return 1
    print_table(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    import os

    from srl.evaluate import SOURCES, evaluate

    agents = {}
    for item in args.agents:
        prefix, sep, source = item.partition("=")
        if not sep or not prefix or not source:
            print(f"srl: --agents {item!r}: expected PREFIX=SOURCE, SOURCE one of {', '.join(SOURCES)}, "
                  "a checkpoint path or FILE.py:NAME", file=sys.stderr)
            return EXIT_CONFIG
        agents[prefix] = source if source in SOURCES else str(Path(source).resolve())
    run_dir = Path(args.run_dir).resolve()
    if not RunPaths(run_dir).config.is_file():
        print(f"srl: {run_dir} is not a run directory (no config.yaml)", file=sys.stderr)
        return EXIT_CONFIG
    source = args.checkpoint if args.checkpoint in SOURCES else str(Path(args.checkpoint).resolve())
    video = None
    if args.video:
        from srl.envs.render import Video

        try:
            video = Video(Path(args.video).resolve(), args.video_episodes, args.video_seconds)  # resolved before chdir
        except ValueError as exc:
            print(f"srl: --video: {exc}", file=sys.stderr)
            return EXIT_CONFIG
    workdir = RunPaths(run_dir).workdir  # envs that write files (VizDoom) write them inside the run, as in training
    workdir.mkdir(exist_ok=True)
    os.chdir(workdir)
    try:
        result = evaluate(run_dir, args.episodes, args.envs, agents, args.deterministic, video=video,
                          default_source=source, allow_non_finite=args.allow_non_finite)
    except ValueError as exc:
        print(f"srl: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    print(f"{result.episodes} episodes: return {result.return_mean:.3f} ± {result.return_stderr:.3f} (standard "
          f"error), length {result.length_mean:.1f}; agents: "
          + ", ".join(f"{a}={s}" for a, s in result.agents.items())
          + "".join(f"; {p} return {r:.3f}" for p, r in result.policy_returns.items())
          + ("; won: " + ", ".join(f"{who} {n} ({n / result.episodes:.1%})" for who, n in result.outcomes.items())
             if result.outcomes else ""))
    if args.json:
        Path(args.json).write_text(json.dumps(result.as_dict(), indent=1))
    if video is not None:
        print(f"video: {video.path}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from srl.export import export

    run_dir = Path(args.run_dir)
    if not RunPaths(run_dir).config.is_file():
        print(f"srl: {run_dir} is not a run directory (no config.yaml)", file=sys.stderr)
        return EXIT_CONFIG
    try:
        done = export(run_dir, args.output, args.format, args.checkpoint or "latest")
    except (ValueError, NotImplementedError) as exc:
        print(f"srl: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    print(f"wrote {done.path} ({done.format}, from {done.checkpoint}): "
          + ", ".join(f"{name} {kind}" for name, kind in done.inputs.items()) + " -> "
          + ", ".join(f"{name} {kind}" for name, kind in done.outputs.items()))
    return 0


def _console():
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 200)


def _configs(args: argparse.Namespace) -> int:
    from srl.report.configs import bundled_config_infos

    infos = bundled_config_infos()
    if args.json:
        print(json.dumps([info.as_dict() for info in infos], indent=1, ensure_ascii=False))
        return 0
    from rich.table import Table

    table = Table(title="bundled configs (`srl train NAME`)")
    for column in ("config", "env", "algorithm", "needs", "reference result"):
        table.add_column(column)
    for info in infos:
        needs = ", ".join(info.extras) or "(core)"
        if info.extras and not info.installed:
            needs += " [red](not installed)[/red]"
        reference = f"{info.reference} [dim]({info.reference_source})[/dim]" if info.reference else "-"
        table.add_row(info.name, info.env, info.algorithm, needs, reference)
    console = _console()
    console.print(table)
    console.print("Install an extra with `pip install -e '.[NAME]'`; football also needs "
                  "`bash scripts/install_football.sh`.", highlight=False)
    return 0


def _plot(args: argparse.Namespace) -> int:
    from srl.report.plot import PlotError, plot

    def warn(message: str) -> None:
        print(f"srl: {message}", file=sys.stderr)

    if args.smooth < 1:
        print("srl: --smooth must be at least 1 (1: no smoothing)", file=sys.stderr)
        return EXIT_CONFIG
    try:
        path = plot(args.runs, args.output, metric=args.metric, x=args.x, window=args.smooth, band_kind=args.band,
                    title=args.title, warn=warn)
    except PlotError as exc:
        print(f"srl: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    print(f"srl: wrote {path}", file=sys.stderr)
    return 0


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m{secs:02d}s"


def _runs(args: argparse.Namespace) -> int:
    from srl.report.runs import find_runs, run_info

    root = Path(args.dir)
    if not root.is_dir():
        print(f"srl: {root} is not a directory", file=sys.stderr)
        return 1
    infos = [run_info(run) for run in find_runs(root)]
    if args.json:
        print(json.dumps([info.as_dict() for info in infos], indent=1))
        return 0
    if not infos:
        print(f"no runs under {root} (a run directory holds config.yaml and status.json or summary.json)")
        return 0
    from rich.markup import escape
    from rich.table import Table

    colours = {"running": "green", "stopped": "", "failed": "red", "died": "yellow"}
    table = Table(title=f"{len(infos)} run{'s' if len(infos) != 1 else ''} under {root}")
    for column in ("config", "run", "state", "env steps", "best return", "last return", "wall time", "stop reason"):
        table.add_column(column, justify="right" if column in ("env steps", "best return", "last return",
                                                                "wall time") else "left",
                         overflow="fold" if column == "run" else "ellipsis")  # a path is never cut short
    for info in infos:
        colour = colours.get(info.state, "")
        state = f"[{colour}]{info.state}[/{colour}]" if colour else info.state
        reason = info.stop_reason or ""
        if info.errors:
            reason += f" (errors: {', '.join(info.errors)})"
        table.add_row(escape(info.config), escape(info.path), state,
                      f"{info.env_steps:,}" if info.env_steps is not None else "-",
                      f"{info.best_return:.2f}" if info.best_return is not None else "-",
                      f"{info.last_return:.2f}" if info.last_return is not None else "-",
                      _duration(info.wall_time_s), escape(reason))
    _console().print(table)
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from srl.sweep import ENV_STEPS, SweepSettings, as_overrides, plot, read_space, resume_sweep, start_sweep, table

    try:
        if args.resume:
            sweep = resume_sweep(Path(args.resume), args.trials, args.parallel)
        else:
            if not args.config or not args.space:
                print("srl: config error: sweep: give a CONFIG and --space SPACE.yaml (or --resume DIR)", file=sys.stderr)
                return EXIT_CONFIG
            name = Path(args.config).stem
            directory = Path(args.run_dir or Path("runs") / "sweeps" / name / time.strftime("%Y%m%d-%H%M%S"))
            settings = SweepSettings(config=args.config, space=read_space(args.space), trials=args.trials or 20,
                                     parallel=args.parallel or 1, objective=args.objective or ENV_STEPS,
                                     overrides=list(args.overrides), storage=args.storage,
                                     report_every=args.report_every, seed=args.seed)
            sweep = start_sweep(directory, settings)
    except ConfigError as exc:
        print(f"srl: config error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except ImportError as exc:
        print(f"srl: sweep needs Optuna: pip install -e '.[sweep]' ({exc})", file=sys.stderr)
        return 1
    print(f"srl: sweep directory {sweep.dir} ({sweep.settings.trials} trials, {sweep.settings.parallel} at once)",
          file=sys.stderr)
    previous = {sig: signal.signal(sig, lambda signum, frame: sweep.stop()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        study = sweep.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    rows = table(study)
    (sweep.dir / "trials.json").write_text(json.dumps(rows, indent=1))
    from rich.table import Table

    shown = Table(title=f"{len(rows)} trials in {sweep.dir}")
    for column in ("trial", "state", sweep.settings.objective, "env steps", *sweep.settings.space):
        shown.add_column(column, justify="left" if column == "state" else "right")
    for row in rows:
        shown.add_row(str(row["trial"]), row["state"], "-" if row["value"] is None else f"{row['value']:,.4g}",
                      "-" if row["env_steps"] is None else f"{row['env_steps']:,}",
                      *(f"{row['params'].get(k, '-'):.4g}" if isinstance(row["params"].get(k), float)
                        else str(row["params"].get(k, "-")) for k in sweep.settings.space))
    _console().print(shown)
    finished = [r for r in rows if r["state"] == "complete"]
    if finished:
        best = study.best_trial
        print(f"best: trial {best.number}, {sweep.settings.objective} {best.value:,.4g}: "
              f"{' '.join(as_overrides(best.params))}")
        print(f"plot: {plot(rows, sweep.settings, sweep.dir / 'sweep.png')}")
    if sweep.stopping.is_set():
        print(f"srl: sweep stopped; srl sweep --resume {sweep.dir} continues it", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0


def _die_with_parent() -> None:
    """A sweep's trial (SRL_PARENT_PID set): SIGTERM, which stops a run cleanly, when the sweep that
    started it dies, however it dies (Linux), so no trial runs on unwatched."""
    parent = os.environ.pop("SRL_PARENT_PID", None)
    if parent is None or not parent.isdigit():
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != int(parent):  # it died before the call above: nothing would tell us
        os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="srl", description="SRL: really scalable reinforcement learning")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train an experiment")
    train.add_argument("config", nargs="?", help="bundled config name or YAML path")
    train.add_argument("overrides", nargs="*", help="key.sub=value overrides (anywhere on the line)")
    train.add_argument("--run-dir", help="where to write the run (default runs/<name>/<timestamp>)")
    train.add_argument("--resume", metavar="DIR", help="continue the run in DIR from its last checkpoint")
    train.set_defaults(fn=_train)
    sweep = sub.add_parser("sweep", help="search a config's hyper-parameters on Optuna, each trial a run")
    sweep.add_argument("config", nargs="?", help="bundled config name or YAML path")
    sweep.add_argument("overrides", nargs="*", help="key.sub=value overrides for every trial")
    sweep.add_argument("--space", metavar="SPACE.yaml", help="config fields and their distributions")
    sweep.add_argument("--trials", type=int, help="trials in all (default 20)")
    sweep.add_argument("--parallel", type=int, help="trials at once (default 1)")
    sweep.add_argument("--run-dir", help="the sweep's directory (default runs/sweeps/<name>/<timestamp>)")
    sweep.add_argument("--objective", help="env_steps (to the config's stop.episode_return, minimised; the "
                                            "default) or a number of the run's summary, maximised (eval_return_mean)")
    sweep.add_argument("--storage", help="an Optuna storage URL (default: sweep.db, SQLite, in the sweep's directory)")
    sweep.add_argument("--report-every", type=int, metavar="STEPS",
                       help="env steps between pruning reports (default: stop.env_steps / 100)")
    sweep.add_argument("--seed", type=int, default=0, help="the sampler's seed")
    sweep.add_argument("--resume", metavar="DIR", help="continue the sweep in DIR")
    sweep.set_defaults(fn=_sweep)
    status = sub.add_parser("status", help="show a run's workers")
    status.add_argument("run_dir")
    status.add_argument("--json", action="store_true")
    status.set_defaults(fn=_status)
    top = sub.add_parser("top", help="watch a run live: its workers' fps, latency, queues and staleness")
    top.add_argument("run_dir")
    top.add_argument("--once", action="store_true", help="print one frame and exit (for scripts)")
    top.add_argument("--interval", type=float, default=1.0, help="seconds between redraws")
    top.set_defaults(fn=_top)
    bench = sub.add_parser("bench", help="measure E, I, L, S, T and the system's efficiency")
    bench.add_argument("config", help="bundled config name or YAML path")
    bench.add_argument("overrides", nargs="*", help="key.sub=value overrides")
    bench.add_argument("--seconds", type=float, default=10.0, help="length of each measurement")
    bench.add_argument("--cores", type=int, default=None, help="cores to measure on (default: all)")
    bench.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    bench.set_defaults(fn=_bench)
    play = sub.add_parser("evaluate", help="play episodes with a run's checkpoint, no training")
    play.add_argument("run_dir")
    play.add_argument("checkpoint", nargs="?", default="latest", metavar="SOURCE",
                      help="what every agent not named by --agents acts with: latest (default), best (the best "
                           "evaluation score, with evaluation.count=1), initial, random or a ckpt-*.pt path")
    play.add_argument("--episodes", type=int, default=100)
    play.add_argument("--envs", type=int, default=8, help="envs stepped together")
    play.add_argument("--agents", nargs="*", default=[], metavar="PREFIX=SOURCE",
                      help="agents whose id starts with PREFIX act with SOURCE: latest (default), best, initial, "
                           "random, a ckpt-*.pt path or a player in a Python file, FILE.py:NAME")
    play.add_argument("--deterministic", action="store_true", help="take the most likely action")
    play.add_argument("--allow-non-finite", action="store_true",
                      help="play a checkpoint whose weights hold NaN or infinity (refused otherwise)")
    play.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    play.add_argument("--video", metavar="FILE.mp4", help="also record the first env's episodes to a video")
    play.add_argument("--video-episodes", type=int, default=1, metavar="N", help="episodes in the video (default 1)")
    play.add_argument("--video-seconds", type=float, default=300.0, metavar="S",
                      help="cut the video after S seconds of play (default 300)")
    play.set_defaults(fn=_evaluate)
    export = sub.add_parser("export", help="write a run's policy as a TorchScript or ONNX file")
    export.add_argument("run_dir")
    export.add_argument("-o", "--output", required=True, help="the file to write")
    export.add_argument("--format", choices=("torchscript", "onnx"),
                        help="default: from the file's suffix (.onnx; .pt or .ts for TorchScript)")
    export.add_argument("--checkpoint", metavar="PATH",
                        help="a ckpt-*.pt file, or best (default: the run's latest valid one)")
    export.set_defaults(fn=_export)
    configs = sub.add_parser("configs", help="the bundled configs: env, algorithm, extra needed, reference result")
    configs.add_argument("--json", action="store_true", help="print JSON for scripts")
    configs.set_defaults(fn=_configs)
    runs = sub.add_parser("runs", help="the runs under a directory: state, env steps, returns, wall time")
    runs.add_argument("dir", nargs="?", default="runs", help="where to look (default runs/)")
    runs.add_argument("--json", action="store_true", help="print JSON for scripts")
    runs.set_defaults(fn=_runs)
    from srl.report.runs import BANDS, DEFAULT_METRIC, X_AXES

    plot = sub.add_parser("plot", help="learning curves of runs to a PNG; seeds of one config as mean and band")
    plot.add_argument("runs", nargs="+", metavar="RUN", help="run directories, or directories holding runs")
    plot.add_argument("--metric", default=DEFAULT_METRIC,
                      help=f"metric of metrics.jsonl, nested ones as train/value_loss (default {DEFAULT_METRIC})")
    plot.add_argument("--x", choices=X_AXES, default="env_steps", help="x axis (default env_steps)")
    plot.add_argument("--smooth", type=int, default=1, metavar="N",
                      help="moving average over N reports (default 1: none)")
    plot.add_argument("--band", choices=BANDS, default="minmax",
                      help="band around the seeds' mean: min-max (default) or ±1 standard deviation")
    plot.add_argument("--title", help="the figure's title")
    plot.add_argument("-o", "--output", required=True, metavar="FILE.png", help="image to write (PNG, SVG, PDF...)")
    plot.set_defaults(fn=_plot)
    _die_with_parent()
    args, extra = parser.parse_known_args(argv)
    unknown = [a for a in extra if "=" not in a or a.startswith("-")]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if extra:
        if args.command not in ("train", "bench", "sweep"):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides = [*args.overrides, *extra]
    try:
        return args.fn(args)
    except KeyboardInterrupt:
        # Ctrl-C that a command does not take itself (a run stops gracefully and returns its
        # summary): whatever it started was stopped on the way out (the bench's runs, `auto`'s
        # measuring processes); one line, no traceback.
        print(f"srl: {args.command} interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
