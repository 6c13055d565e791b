"""Peer runner for side_by_side.py: Sample Factory 2 APPO on Pong or HalfCheetah.

Runs in its own venv (setup_sample_factory.sh), never in the project's; prints `@progress`
lines (peer_common.py) after training iterations until --max-seconds or until the harness
stops it:

    PY=$(bash benchmarks/peers/setup_sample_factory.sh)
    $PY benchmarks/peers/sf_run.py --task pong --mode score --max-seconds 60

Both modes start from Sample Factory's own settings for the task (sf_examples: the `atari`
and `mujoco` parameter overrides) and its own env factories (`atari_pong`: PongNoFrameskip-v4
with its DeepMind wrappers, frame skip 4, 84x84 gray, 4 frames stacked; `mujoco_halfcheetah`:
HalfCheetah-v4, since gymnasium<1.0, which sample-factory 2.1 needs, has no v5; the model and
reward are v5's). Those examples assume 8 rollout workers; on this box the workers are as
many as the cores given, with as many envs in all.

--mode throughput then sets the matched update shape from --shape: `workers` rollout workers
with envs / workers envs each (in 2 splits, Sample Factory's double-buffered sampling), rollout
`rollout`, minibatches of batch / minibatches rows, `minibatches` per epoch, `epochs` epochs,
asynchronous (APPO, its default), and the network SRL's config uses (Pong: the Nature CNN,
shared by actor and critic, no RNN; HalfCheetah: separate 64-64 tanh actor and critic, a
state-independent std starting at exp(-0.5), normalised inputs and returns).
--mode score keeps Sample Factory's example settings (synchronous PPO there, as they ship).

Frames are the learner's env steps with `summaries_use_frameskip` off: env steps after frame
skip, as SRL counts them. The score is the runner's window of the last 100 episode returns
(`stats_avg`): on Pong the game score from gymnasium's RecordEpisodeStatistics (Sample Factory's
own `reward` sums clipped rewards per episodic life), on HalfCheetah the raw return.
"""

import time

T0 = time.time()

import ale_py  # noqa: E402,F401  (spawned workers import this module: it registers the Atari envs there)
import sys  # noqa: E402

from peer_common import Progress, announce, exit_on_sigterm, parse_args  # noqa: E402

SF_ENV = {"pong": "atari_pong", "halfcheetah": "mujoco_halfcheetah"}
#: The episode statistic that is the task's score.
EPISODE_STAT = {"pong": "RecordEpisodeStatistics_reward", "halfcheetah": "reward"}


def quiet_sample_factory() -> None:
    """Sample Factory logs at DEBUG in every process; keep warnings and errors."""
    import logging
    import warnings

    from sample_factory.utils.utils import log

    log.setLevel(logging.WARNING)
    warnings.filterwarnings("ignore")


if __name__ == "__mp_main__":
    quiet_sample_factory()  # a spawned worker importing this script as its main module


def sf_flags(args, train_dir: str) -> dict:
    """Sample Factory's command line (beyond the example's defaults) for the task and mode."""
    import math
    import os

    cores = len(os.sched_getaffinity(0))
    flags = {
        "env": SF_ENV[args.task], "experiment": args.task, "train_dir": train_dir, "restart_behavior": "overwrite",
        "device": "cpu", "seed": args.seed, "train_for_seconds": int(args.max_seconds),
        "train_for_env_steps": 10**10, "summaries_use_frameskip": False, "stats_avg": 100,
        # checkpoints and summaries would only cost time: the progress lines are the result
        "save_every_sec": 10**6, "save_best_every_sec": 10**6, "save_best_after": 10**12,
        "experiment_summaries_interval": 10**6, "log_to_file": False, "with_wandb": False,
    }
    if args.mode == "score":
        envs = 8 if args.task == "pong" else 64  # the examples' 8 workers x 1 env / 8 workers x 8 envs
        workers = min(cores, envs)
        flags.update(num_workers=workers, num_envs_per_worker=envs // workers,
                     worker_num_splits=2 if envs // workers % 2 == 0 else 1)
        return flags
    s = args.shape
    per_worker = s["envs"] // s["workers"]
    flags.update(num_workers=s["workers"], num_envs_per_worker=per_worker,
                 worker_num_splits=2 if per_worker % 2 == 0 else 1, rollout=s["rollout"],
                 batch_size=s["batch"] // s["minibatches"], num_batches_per_epoch=s["minibatches"],
                 num_epochs=s["epochs"], async_rl=True, use_rnn=False, recurrence=1, with_vtrace=False,
                 gamma=0.99, gae_lambda=0.95)
    if args.task == "pong":  # as srl's pong-ppo: images scaled by 1/255, no input or return normalisation
        flags.update(encoder_conv_architecture="convnet_atari", encoder_conv_mlp_layers=[512], obs_scale=255.0,
                     normalize_input=False, normalize_returns=False, actor_critic_share_weights=True,
                     learning_rate=2.5e-4, ppo_clip_ratio=0.1, exploration_loss_coeff=0.01, max_grad_norm=0.5)
    else:  # as srl's halfcheetah-ppo
        flags.update(encoder_mlp_layers=[64, 64], nonlinearity="tanh", actor_critic_share_weights=False,
                     adaptive_stddev=False, initial_stddev=math.exp(-0.5), normalize_input=True,
                     normalize_returns=True, learning_rate=3e-4, ppo_clip_ratio=0.2, exploration_loss_coeff=0.0)
    return flags


def to_argv(flags: dict) -> list:
    argv = []
    for k, v in flags.items():
        if isinstance(v, list):
            argv += [f"--{k}", *map(str, v)]
        else:
            argv.append(f"--{k}={v}")
    return argv


def main(argv=None) -> int:
    args = parse_args(__doc__.split("\n\n")[0], argv)
    if args.task == "spread":
        print("sample-factory is not a peer on spread (multi-agent MPE)", file=sys.stderr)
        return 2
    exit_on_sigterm()

    import contextlib
    import glob
    import importlib.metadata as md
    import os
    import shutil
    import tempfile

    from sample_factory.algo.runners.runner import AlgoObserver
    from sample_factory.algo.utils.misc import ExperimentStatus
    from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args
    from sample_factory.envs.env_utils import register_env
    from sample_factory.train import make_runner

    quiet_sample_factory()
    if args.task == "pong":
        from sf_examples.atari.atari_params import atari_override_defaults as override_defaults
        from sf_examples.atari.atari_utils import make_atari_env as make_env
    else:
        from sf_examples.mujoco.mujoco_params import mujoco_override_defaults as override_defaults
        from sf_examples.mujoco.mujoco_utils import make_mujoco_env as make_env
    register_env(SF_ENV[args.task], make_env)

    progress = Progress(every_s=0.5)

    class Report(AlgoObserver):
        """A progress line after training iterations (at most every half second)."""

        def on_training_step(self, runner, training_iteration_since_resume: int) -> None:
            # Atari: the game score from gymnasium's RecordEpisodeStatistics (innermost wrapper);
            # Sample Factory's own "reward" sums clipped rewards up to each episodic-life end.
            stats = runner.policy_avg_stats.get(EPISODE_STAT[args.task])
            window = list(stats[0]) if stats else []
            progress.report(runner.env_steps.get(0, 0), score=sum(window) / len(window) if window else None,
                            episodes=len(window), boundary=True)

    train_dir = tempfile.mkdtemp(prefix="sf-run-")
    status = ExperimentStatus.FAILURE
    try:
        flags = sf_flags(args, train_dir)
        announce("sample-factory", md.version("sample-factory"), flags={k: v for k, v in flags.items()
                                                                      if k not in ("train_dir", "experiment")})
        sf_argv = to_argv(flags)
        parser, partial = parse_sf_args(argv=sf_argv)
        override_defaults(partial.env, parser)
        cfg = parse_full_cfg(parser, sf_argv)
        cfg, runner = make_runner(cfg)
        runner.register_observer(Report())
        status = runner.init()
        if status == ExperimentStatus.SUCCESS:
            status = runner.run()
    finally:
        shutil.rmtree(train_dir, ignore_errors=True)
        # Sample Factory shares tensors through torch's file_system strategy: segments named
        # torch_<pid>_* that only a clean exit removes; the harness stops the workers by signal.
        for leftover in glob.glob(f"/dev/shm/torch_{os.getpid()}_*"):
            with contextlib.suppress(OSError):
                os.unlink(leftover)
    return 0 if status == ExperimentStatus.SUCCESS else 1


if __name__ == "__main__":
    sys.exit(main())
