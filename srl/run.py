"""SRL from Python: train a run, or start one and watch it, stop it, open it later, and play
its policy in a loop of your own.

    import srl

    run = srl.train("cartpole-ppo", overrides=["stop.episode_return=475"])   # to its stop rule
    run.summary["episode_return_mean"], run.metrics()[-1]

    handle = srl.start("pong-ppo", run_dir="runs/pong")    # returns at once; the run goes on
    handle.status()["env_steps"], handle.metrics(as_frame=True)
    handle.stop(); handle.wait()

    policy = srl.load_policy(run.dir)                      # version "best", "latest" or a number
    action = policy.act(obs)                               # obs from your own Gymnasium env

A config is a bundled name, a YAML path, a mapping or an `ExperimentConfig`; `overrides` are the
`key.sub=value` strings of the command line. `srl train` is a thin layer over `launch` below.
`start` runs the controller on a thread of its own, so it is safe from a notebook cell or any
thread: no signal handler is installed off the main thread, and `stop()` ends the run as
Ctrl-C does (every worker stopped, its shared memory removed).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from srl.api.config import ConfigError, ExperimentConfig, run_config
from srl.api.run_paths import RunPaths
from srl.prepare import Prepared, prepare
from srl.report import runs as run_files

#: What `load_policy` accepts besides a version number.
VERSIONS = ("best", "latest")


class RunExists(ConfigError):
    """The run directory already holds a run (resume it instead)."""


class RunDirUnwritable(OSError):
    """The run directory cannot be written (a full disk, a read-only file system)."""


class Run:
    """A run directory, read as it is now: a finished run's, or a live one's (`srl.start`)."""

    def __init__(self, run_dir: str | Path) -> None:
        self.dir = Path(run_dir)
        self.paths = RunPaths(self.dir)

    @classmethod
    def open(cls, run_dir: str | Path) -> Run:
        """A run directory written by `srl train`, `srl.train` or `srl.start`."""
        if not RunPaths(run_dir).config.is_file():
            raise ValueError(f"{run_dir} is not a run directory (no config.yaml)")
        return cls(run_dir)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.dir)!r})"

    @property
    def config(self) -> ExperimentConfig:
        """The config the run ran with (every default filled in)."""
        return run_config(self.dir)

    @property
    def summary(self) -> dict[str, Any] | None:
        """What the run reported when it ended (None while it runs)."""
        return run_files.read_json(self.paths.summary)

    def status(self) -> dict[str, Any]:
        """The run's state, env steps and workers as its controller last wrote them."""
        return run_files.read_json(self.paths.status) or {}

    def metrics(self, as_frame: bool = False) -> Any:
        """Every row of `metrics.jsonl` so far, as dicts or (`as_frame`, needs pandas) a DataFrame
        with nested sections flattened to `section/name` columns."""
        rows = run_files.read_metrics(self.dir)
        if not as_frame:
            return rows
        try:
            import pandas
        except ImportError:
            raise ImportError("Run.metrics(as_frame=True) needs pandas (pip install pandas); "
                              "without it, metrics() gives the rows as dicts") from None
        return pandas.json_normalize(rows, sep="/")

    @property
    def graph(self) -> dict[str, Any]:
        """The worker graph that ran: its groups and streams."""
        import yaml

        return yaml.safe_load(self.paths.graph.read_text())

    def checkpoints(self, policy: str | None = None) -> list[Path]:
        """The kept checkpoints, oldest first (with several policies, `policy`'s)."""
        from srl.learn import checkpoint

        directory = self.paths.checkpoints(policy)
        return [checkpoint.path_of(directory, version) for version in checkpoint.versions(directory)]

    def load_policy(self, version: str | int = "best", policy: str | None = None) -> LoadedPolicy:
        return load_policy(self.dir, version, policy)


class Handle(Run):
    """A run going on in this process (`srl.start`): watch it, stop it, wait for it."""

    def __init__(self, run_dir: Path, controller: Any) -> None:
        super().__init__(run_dir)
        self._controller = controller
        self._result: dict[str, Any] | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"srl run {run_dir}", daemon=True)

    def _run(self) -> None:
        try:
            self._result = self._controller.run()
        except BaseException as exc:  # handed to whoever waits
            self._error = exc

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self, reason: str = "stopped") -> None:
        """Ask the run to stop as Ctrl-C stops it (returns at once; `wait` for the end)."""
        self._controller.request_stop(reason)

    def wait(self, timeout: float | None = None) -> dict[str, Any] | None:
        """Wait for the run to end; its summary (None if `timeout` passed first). A failure to
        start is raised here."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            return None
        if self._error is not None:
            raise self._error
        return self._result


def launch(config: str | Path | Mapping[str, Any] | ExperimentConfig | None = None, overrides: Sequence[str] = (),
           run_dir: str | Path | None = None, resume: str | Path | None = None,
           say: Callable[[str], None] | None = None) -> tuple[Prepared, Path, Any]:
    """The prepared run, its directory and its controller, ready to `run()`: nothing has started.

    Raises `ConfigError` (a bad config; `RunExists` for a directory that holds a run already),
    `srl.launch.run_dir.RunInUse` (another controller holds the directory) and `RunDirUnwritable`
    (an `OSError`: the directory cannot be written)."""
    if run_dir is not None and resume is None:
        _check_free(Path(run_dir))  # before the fork server starts: nothing to undo
    try:
        prepared = prepare(config, list(overrides), resume=resume, say=say, before_components=_start_fork_server)
        directory = prepared.resume or Path(run_dir or Path("runs") / prepared.config.name / time.strftime("%Y%m%d-%H%M%S"))
        if not prepared.resume:
            _check_free(directory)
        from srl.launch.controller import Controller  # heavy imports only once the config is valid

        try:
            controller = Controller(prepared.config, prepared.graph, directory, resume=prepared.resume is not None)
        except OSError as exc:
            raise RunDirUnwritable(f"cannot write the run directory {directory}: {exc}") from exc
    except BaseException:
        _stop_fork_server()  # the run will not start: nothing of it may stay behind
        raise
    paths = RunPaths(directory)
    if prepared.layout is not None:
        import json

        try:
            paths.layout.write_text(json.dumps(prepared.layout, indent=1))
        except OSError as exc:  # the record of a choice: the run goes on without it
            print(f"srl: cannot write layout.json in {directory}: {exc}", file=sys.stderr)
    return prepared, directory, controller


def _check_free(directory: Path) -> None:
    paths = RunPaths(directory)
    if paths.summary.exists() or paths.status.exists():
        raise RunExists(f"{directory} already holds a run; use --resume {directory} to continue it")


def _stop_fork_server() -> None:
    from srl.launch.local import LocalLauncher

    LocalLauncher.stop_fork_server()  # (none running: nothing to do)


def _start_fork_server(config: ExperimentConfig) -> None:
    """Start the worker fork server now: it imports torch on one core while the components'
    own settings are checked (which imports them) on the other."""
    if config.launcher == "local":
        from srl.launch.local import LocalLauncher

        LocalLauncher.prepare()


def train(config: str | Path | Mapping[str, Any] | ExperimentConfig | None = None, overrides: Sequence[str] = (),
          run_dir: str | Path | None = None, resume: str | Path | None = None) -> Run:
    """Run `config` with `overrides` to its stop rule, here; the finished run. On the main thread
    Ctrl-C stops it cleanly, as it stops `srl train`."""
    _, directory, controller = launch(config, overrides, run_dir, resume)
    controller.run()
    return Run(directory)


def start(config: str | Path | Mapping[str, Any] | ExperimentConfig | None = None, overrides: Sequence[str] = (),
          run_dir: str | Path | None = None, resume: str | Path | None = None) -> Handle:
    """Start `config` with `overrides` and return at once; the run goes on on a thread of its own.
    A bad config raises here, before anything starts."""
    _, directory, controller = launch(config, overrides, run_dir, resume)
    handle = Handle(directory, controller)
    handle._thread.start()
    return handle


class LoadedPolicy:
    """A run's trained policy, to call from a loop of your own:

        policy = srl.load_policy("runs/cartpole-ppo/20261206-101010")
        obs, _ = env.reset()
        while True:
            obs, reward, terminated, truncated, _ = env.step(policy.act(obs))

    `act` takes one observation or a batch (a leading axis, from a vector env), as the env gives
    it: an array, or a dict of fields for a dict observation. A recurrent policy carries its state:
    `state = policy.initial_state()`, then `action, state = policy.act(obs, state)`.
    """

    def __init__(self, policy: Any, observation_space: Any, action_space: Any, label: str) -> None:
        self.policy = policy
        self.observation_space = observation_space  # a Dict of fields, as SRL's envs give them
        self.action_space = action_space
        #: Which checkpoint it is (`ckpt-00000042.pt`, `best.pt`).
        self.label = label

    def __repr__(self) -> str:
        return f"LoadedPolicy({self.label})"

    def initial_state(self, batch: int = 1) -> Any:
        return self.policy.initial_state(batch)

    def act(self, obs: Any, state: Any = None, deterministic: bool = True) -> Any:
        """The action for `obs` (for each row of a batch); with `state`, `(action, next state)`."""
        from srl.data import keys
        from srl.data.named_array import NamedArray

        spaces = self.observation_space.spaces
        fields = dict(obs) if isinstance(obs, Mapping) else {next(iter(spaces)): obs}
        missing = [k for k in spaces if k not in fields]
        if missing:
            raise ValueError(f"the observation lacks the field(s) {missing} the policy reads (fields: {list(spaces)})")
        first = next(iter(spaces))
        single = np.ndim(fields[first]) == len(spaces[first].shape)
        batch = NamedArray({k: np.asarray(fields[k], dtype=spaces[k].dtype)[None] if single
                            else np.asarray(fields[k], dtype=spaces[k].dtype) for k in spaces})
        rows = batch[first].shape[0]
        out = self.policy.rollout(batch, state if state is not None else self.policy.initial_state(rows),
                                  deterministic=deterministic)
        action = np.asarray(out[keys.ACTION])
        if hasattr(self.action_space, "low"):  # as SRL's envs take continuous actions: within bounds
            action = np.clip(action, self.action_space.low, self.action_space.high)
        action = action[0] if single else action
        if state is None:
            return action
        return action, out[keys.RNN_STATE] if keys.RNN_STATE in out else state


def load_policy(run_dir: str | Path, version: str | int = "best", policy: str | None = None,
                allow_non_finite: bool = False) -> LoadedPolicy:
    """The policy of the run in `run_dir` at `version`: "best" (the best evaluated, kept by an
    evaluation worker; else the newest), "latest" (the newest checkpoint) or a policy version
    number. With several policies, `policy` names one. Non-finite weights are refused unless
    `allow_non_finite`."""
    from srl.api.components import make_env
    from srl.api.env import spaces_of
    from srl.evaluate import policy_for
    from srl.learn import checkpoint

    run_dir = Path(run_dir)
    config = run_config(run_dir)
    checkpoints = RunPaths(run_dir).checkpoints(policy)
    if isinstance(version, bool) or not (version in VERSIONS or isinstance(version, int)):
        raise ValueError(f"version must be one of {', '.join(VERSIONS)} or a policy version number, not {version!r}")
    if version == "best" and checkpoint.tagged(checkpoints, "best") is None:
        version = "latest"  # nothing was evaluated: the newest is the best there is
    source = str(checkpoint.path_of(checkpoints, version)) if isinstance(version, int) else version
    if config.policies and policy not in config.policies:
        raise ValueError(f"{run_dir} trains several policies: name one (policy=, one of {', '.join(config.policies)})")
    env = make_env(config.env)
    try:
        if config.policies:
            from srl.api.agents import AgentRouter

            router = AgentRouter.from_rules(env.agent_ids, [(r.match, r.policy) for r in config.agents],
                                            config.policies)
            spaces = spaces_of(env, router.agents_of(policy)[0])
        else:
            spaces = spaces_of(env)
    finally:
        env.close()
    loaded, label = policy_for(source, run_dir, config, spaces, policy, allow_non_finite)
    return LoadedPolicy(loaded, *spaces, label)
