"""Measuring an experiment's parts in isolation, each in processes of its own.

The rates `srl bench` and `auto` layouts are built from: E (`env_rate`), I
(`inference_rate`) and L (`learner_rate`), and the plumbing that runs them
(`parallel`, `gather`, `in_step`). A measuring process that fails puts its error
instead of its rates (`reporting`); the parent raises it as one `MeasurementError` line, at
once, and leaves no measuring process behind.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import signal
import time
from queue import Empty
from typing import Any, NamedTuple

import numpy as np

from srl.api.config import ExperimentConfig, validate
from srl.api.settings import BufferSettings
from srl.data import keys
from srl.data.named_array import NamedArray, stack


# ------------------------------------------------------------------------ the parts
def env_rate(env_section: dict[str, Any], envs: int, seconds: float, seed: int, queue: Any) -> None:
    """Put the env steps/s of `envs` copies of the env, stepped in turn with random actions."""
    from srl.api.components import make_env
    from srl.envs.gym_slot import GymSlot

    made = [make_env(env_section) for _ in range(envs)]
    rng = np.random.default_rng(seed)
    for i, env in enumerate(made):
        env.reset(seed=seed * 1000 + i)
    agents = made[0].agent_ids
    space = made[0].action_space(agents[0])
    space.seed(seed)
    # Random actions drawn beforehand: drawing one (a Box sample) can cost a quarter of a
    # MuJoCo step, and E is the env's speed, not the sampler's.
    actions = itertools.cycle([space.sample() for _ in range(4096)])
    if GymSlot.takes(made):
        # A Gymnasium env is timed as Gymnasium steps it: SRL's adapter is the system's cost.
        def step(env: Any) -> bool:
            _, _, terminated, truncated, _ = env.env.step(next(actions))
            return terminated or truncated
    else:
        def step(env: Any) -> bool:
            return all(s.done for s in env.step({a: next(actions) for a in agents}).values())
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for env in made:
            if step(env):
                env.reset(seed=int(rng.integers(1 << 30)))
        steps += len(made)
    rate = steps / (time.perf_counter() - start)
    for env in made:
        env.close()
    queue.put(rate)


def policy_inputs(config: ExperimentConfig, rows: int) -> tuple[Any, Any, NamedArray]:
    """Spaces and `rows` recorded observations from the experiment's own env."""
    from srl.api.components import make_env
    from srl.api.env import spaces_of

    env = make_env(config.env)
    obs_space, act_space = spaces_of(env)
    recorded = []
    steps = env.reset(seed=config.seed)
    while len(recorded) < rows:
        for step in steps.values():
            recorded.append(NamedArray(step.obs))
        steps = env.step({a: act_space.sample() for a in env.agent_ids})
        if all(s.done for s in steps.values()):
            steps = env.reset()
    env.close()
    return obs_space, act_space, stack(recorded[:rows])


def inference_rate(config_data: dict[str, Any], batch: int, seconds: float, queue: Any, device: str = "cpu") -> None:
    from srl.api.components import make_policy
    from srl.workers.threads import compute_threads

    compute_threads(1)
    config = validate(config_data)
    obs_space, act_space, obs = policy_inputs(config, batch)
    policy = make_policy(config.policy, obs_space, act_space, device)
    state = policy.initial_state(batch)
    samples, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        policy.rollout(obs, state)
        samples += batch
    queue.put(samples / (time.perf_counter() - start))


def learner_rate(config_data: dict[str, Any], seconds: float, queue: Any, device: str = "cpu",
                  threads: int = 1, report_cores: bool = False) -> None:
    """Put the env steps/s the learner absorbs; with `report_cores`, then the cores it kept busy
    (the process's CPU time, all its threads, over the wall time)."""
    from srl.api.components import make_algorithm, make_policy
    from srl.workers.threads import compute_threads

    compute_threads(threads)
    config = validate(config_data)
    T = config.actors.trajectory_length
    obs_space, act_space, obs = policy_inputs(config, 512)
    policy = make_policy(config.policy, obs_space, act_space, device)
    algorithm = make_algorithm(config.algorithm, policy)
    # One batch shaped as the trainer sees it: [T + 1, B] with B rows to reach batch_steps.
    B = max(1, -(-config.trainers.batch_steps // T))
    batch = trajectories(policy, obs, T, B)
    replay = replay_settings(config)
    if replay is not None:
        batch, steps_per_step = replay_batch(replay, batch)
    else:
        steps_per_step = T * B
    algorithm.step(batch)  # warm-up (allocations, lazy imports)
    steps, start, cpu = 0.0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        if replay is None:
            policy.update_statistics(batch[keys.OBS][:-1])
        algorithm.step(batch)
        steps += steps_per_step
    wall = time.perf_counter() - start
    queue.put(steps / wall)
    if report_cores:
        queue.put((time.process_time() - cpu) / wall)


def trajectories(policy: Any, obs: NamedArray, T: int, B: int) -> NamedArray:
    """A time-major batch [T + 1, B] of recorded observations, the policy's actions, random rewards."""
    idx = np.random.default_rng(0).integers(0, len(obs), (T + 1) * B)
    rows = obs[idx].map(lambda x: x.reshape(T + 1, B, *x.shape[1:]))
    out = policy.rollout(obs[idx], policy.initial_state(len(idx)))
    batch = NamedArray({keys.OBS: rows})
    for k in (keys.ACTION, keys.LOGPROB, keys.VALUE):
        batch[k] = out[k].reshape(T + 1, B, *out[k].shape[1:])
    batch[keys.REWARD] = np.random.default_rng(1).standard_normal((T + 1, B)).astype(np.float32)
    batch[keys.TERMINATED] = np.zeros((T + 1, B), bool)
    batch[keys.TRUNCATED] = np.zeros((T + 1, B), bool)
    batch[keys.ALIVE] = np.ones((T + 1, B), bool)
    batch[keys.VERSION] = np.zeros((T + 1, B), np.int64)
    if keys.RNN_STATE in out:
        batch[keys.RNN_STATE] = out[keys.RNN_STATE].map(lambda x: x.reshape(T + 1, B, *x.shape[1:]))
    return batch


def replay_settings(config: ExperimentConfig) -> BufferSettings | None:
    """The settings of the graph's first buffer group, or None when nothing replays."""
    from srl.api.graph import apply_overrides
    from srl.graphs import algorithm_graph

    graph = apply_overrides(algorithm_graph(config), config.workers)
    buffers = [g for g in graph.groups.values() if g.kind == "buffer"]
    if not buffers:
        return None
    settings = BufferSettings.model_validate(buffers[0].settings.model_dump() if not isinstance(
        buffers[0].settings, dict) else buffers[0].settings)
    if settings.replay.replay_ratio is None:
        raise ValueError("srl bench: replay.replay_ratio is null, so an update stands for no definite number of "
                         "env steps; bench with a ratio (e.g. replay.replay_ratio=0.25)")
    return settings


def replay_batch(settings: BufferSettings, recorded: NamedArray) -> tuple[NamedArray, float]:
    """A batch as the buffer sends it (drawn from a real `ReplayBuffer`), and the env steps it stands for."""
    from srl.workers.buffer import make_buffer

    r = settings.replay
    buffer = make_buffer(settings)
    B = recorded[keys.REWARD].shape[1] // buffer.G * buffer.G  # whole envs
    buffer.insert(recorded[:, :B])
    return buffer.sample(r.batch_size, r.updates_per_batch), r.updates_per_batch / r.replay_ratio


# ------------------------------------------------------------------------ measuring processes
class Rates(list):
    """What a measurement puts (the `queue` argument), kept in this process."""

    put = list.append


class MeasurementError(RuntimeError):
    """A measurement that could not be made (a measuring process failed, died or never
    answered; a system run that produced nothing): which one, and why, in one line."""


#: What each measuring target (here and in srl/layout.py) measures, for the error that names a failed one.
PARTS = {"env_rate": "the env (E)", "inference_rate": "the policy's forward pass (I)",
         "learner_rate": "the learner (L)", "_inference_rates": "the policy's forward pass",
         "_niced": "the env (E, at the samplers' priority)", "in_step": "the isolated rates"}
#: Seconds a measuring process may take to answer (every part is timed in seconds, not minutes).
ANSWER_TIMEOUT_S = 600.0


def _part(target: Any) -> str:
    name = getattr(getattr(target, "func", target), "__name__", "")  # functools.partial: its function
    return PARTS.get(name, name or repr(target))


def _failure(target: Any, exc: Exception) -> str:
    """'<part>: <error type>: <message>', on one line."""
    return f"{_part(target)}: {type(exc).__name__}: {' '.join(str(exc).split())}"


class Failed(NamedTuple):
    """What a measuring process puts instead of its rates when its part raised."""

    error: str


def reporting(target: Any, args: tuple[Any, ...], queue: Any) -> None:
    """A measuring process: `target(*args, queue)`, or, if it raises, the error put on `queue`
    (the parent raises it as one line; no traceback from a child)."""
    try:
        target(*args, queue)
    except MeasurementError as exc:
        queue.put(Failed(str(exc)))
    except Exception as exc:
        queue.put(Failed(_failure(target, exc)))


def in_step(plan: list[tuple[Any, tuple[Any, ...]]], barrier: Any, queue: Any) -> None:
    """Run the measurements of `plan` one after another, each starting with the other
    processes' (so every core measures the same thing at once); put the list of rates."""
    rates = Rates()
    for target, args in plan:
        barrier.wait(timeout=ANSWER_TIMEOUT_S)
        try:
            target(*args, rates)
        except Exception as exc:
            raise MeasurementError(_failure(target, exc)) from exc
    queue.put(list(rates))


def parallel(target: Any, args: Any, processes: int) -> float:
    """Run `target(*args(i), queue)` in `processes` spawned processes; sum their rates."""
    return float(sum(gather(target, args, processes)))


def gather(target: Any, args: Any, processes: int) -> list[Any]:
    """Run `target(*args(i), queue)` in `processes` spawned processes; what each put, in no set order.

    MeasurementError as soon as one of them fails or dies (not after the timeout), or when
    they have not all answered within ANSWER_TIMEOUT_S."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=reporting, args=(target, args(i), queue)) for i in range(processes)]
    for p in procs:
        p.start()
    try:
        return _answers(queue, procs, _part(target))
    except BaseException:  # Ctrl-C, a failed part, no answer: no part runs on
        for p in procs:
            p.kill()
        raise
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.exitcode is None:
                p.kill()
                p.join()


def _answers(queue: Any, procs: list[Any], part: str) -> list[Any]:
    """One answer from each of `procs`; MeasurementError for a failure, a death or a silence."""
    answers: list[Any] = []
    deadline = time.monotonic() + ANSWER_TIMEOUT_S
    while len(answers) < len(procs):
        try:
            got = queue.get(timeout=0.2)
        except Empty:
            # A process that exited cleanly put its answer first (a queue is flushed before exit).
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead and queue.empty():
                code = dead[0]
                how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
                raise MeasurementError(f"{part}: a measuring process {how}") from None
            if time.monotonic() > deadline:
                raise MeasurementError(f"{part}: {len(procs) - len(answers)} of {len(procs)} measuring "
                                       f"processes gave no answer in {ANSWER_TIMEOUT_S:.0f} s") from None
            continue
        if isinstance(got, Failed):
            raise MeasurementError(got.error)
        answers.append(got)
    return answers
