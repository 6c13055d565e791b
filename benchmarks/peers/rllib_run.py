"""Peer runner for side_by_side.py: RLlib PPO (new API stack) on Pong, HalfCheetah-v5 or spread.

Runs in its own venv (setup_rllib.sh), never in the project's; prints a `@progress` line
(peer_common.py) after every `Algorithm.train()` until --max-seconds or until the harness
stops it:

    PY=$(bash benchmarks/peers/setup_rllib.sh)
    $PY benchmarks/peers/rllib_run.py --task spread --mode score --max-seconds 60

Ray runs as a private single-node cluster inside this process, on a loopback address (127.0.0.2;
Ray would turn 127.0.0.1 into the machine's external address), with a temp dir and an auth token
of its own (removed at exit), no dashboard and no usage reporting. The learner is local (in this
process, `num_learners=0`), env runners are processes (one CPU each).

Envs, as RLlib builds them: Pong is ALE/Pong-v5 with frame skip 1 and no sticky actions under
RLlib's `wrap_atari_for_new_api_stack` (max-pooled frame skip 4, 84x84 gray, no-op starts,
episodic life, fire on reset; 4 frames stacked in the env) with clipped rewards; the score is
the game score (episodes end at game over: Pong has no lives). Spread is mpe2's simple_spread_v3
(N=3, max_cycles=25, discrete actions) as a ParallelPettingZooEnv, all agents on one shared
policy; RLlib counts its env steps (not agent steps), and its episode return (the sum over the
three agents) is divided by 3, to SRL's per-agent mean.

--mode throughput sets the matched update shape from --shape (env runners = `workers`, each
with envs / workers envs, `rollout_fragment_length` = rollout, `train_batch_size_per_learner`
= batch, minibatches of batch / minibatches (spread: one minibatch of all agent rows),
`epochs` epochs) and the network SRL's config uses (Pong: the Nature CNN shared by actor and
critic, its 3136x512 dense layer as a 7x7 valid convolution; HalfCheetah: separate 64-64 tanh
nets, a free log-std, a mean/std observation filter; spread: separate 64-64 relu nets).
--mode score runs RLlib's own tuned examples for the task (tuned_examples/ppo: `pong_ppo.py`;
`benchmark_ppo_mujoco.py`, its 32 runners x 512 steps as 2 runners x 16 envs on this box;
spread: `examples/multi_agent/pettingzoo_parameter_sharing.py`, PPO's defaults otherwise).
"""

import time

T0 = time.time()

import os  # noqa: E402
import sys  # noqa: E402

from peer_common import Progress, announce, exit_on_sigterm, parse_args  # noqa: E402

N_AGENTS = 3  # simple_spread's N
#: The Nature CNN: three convolutions, then its 512-wide dense layer as a convolution over the whole 7x7 map.
NATURE_CNN = [[32, 8, 4, "valid"], [64, 4, 2, "valid"], [64, 3, 1, "valid"], [512, 7, 1, "valid"]]


def make_pong(cfg):
    import ale_py
    import gymnasium as gym
    from ray.rllib.env.wrappers.atari_wrappers import wrap_atari_for_new_api_stack

    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0, full_action_space=False)
    return wrap_atari_for_new_api_stack(env, dim=84, framestack=4)


def make_spread(cfg):
    from mpe2 import simple_spread_v3
    from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv

    return ParallelPettingZooEnv(simple_spread_v3.parallel_env(N=N_AGENTS, max_cycles=25, continuous_actions=False))


def build_config(args, cores: int):
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    config = PPOConfig().framework("torch").learners(num_learners=0).reporting(metrics_num_episodes_for_smoothing=100)
    config = config.debugging(seed=args.seed)
    if args.task == "pong":
        config = config.environment("pong", clip_rewards=True)
    elif args.task == "halfcheetah":
        config = config.environment("HalfCheetah-v5")
    else:
        # Batches counted in agent steps in throughput mode, so one minibatch can hold every agent row.
        config = config.environment("spread").multi_agent(
            policies={"shared"}, policy_mapping_fn=lambda agent_id, episode, **kw: "shared",
            count_steps_by="agent_steps" if args.mode == "throughput" else "env_steps")

    if args.mode == "throughput":
        s = args.shape
        agents = N_AGENTS if args.task == "spread" else 1
        runner_kwargs = dict(num_env_runners=s["workers"], num_envs_per_env_runner=s["envs"] // s["workers"],
                             rollout_fragment_length=s["rollout"])
        train_kwargs = dict(train_batch_size_per_learner=s["batch"] * agents, num_epochs=s["epochs"],
                            minibatch_size=s["batch"] * agents // s["minibatches"], gamma=0.99, lambda_=0.95)
        if args.task == "pong":  # as srl's pong-ppo
            model = DefaultModelConfig(conv_filters=NATURE_CNN, conv_activation="relu", head_fcnet_hiddens=[],
                                       vf_share_layers=True)
            train_kwargs.update(lr=2.5e-4, clip_param=0.1, vf_clip_param=10.0, entropy_coeff=0.01, vf_loss_coeff=0.5,
                                grad_clip=0.5, grad_clip_by="global_norm", use_kl_loss=False)
        elif args.task == "halfcheetah":  # as srl's halfcheetah-ppo
            from ray.rllib.connectors.env_to_module.mean_std_filter import MeanStdFilter

            model = DefaultModelConfig(fcnet_hiddens=[64, 64], fcnet_activation="tanh", vf_share_layers=False,
                                       free_log_std=True)
            runner_kwargs.update(env_to_module_connector=lambda env, spaces=None, device=None: MeanStdFilter())
            train_kwargs.update(lr=3e-4, clip_param=0.2, entropy_coeff=0.0, use_kl_loss=False)
        else:  # as srl's spread-mappo (each agent's critic reads its own observation here, as RLlib's does)
            model = DefaultModelConfig(fcnet_hiddens=[64, 64], fcnet_activation="relu", vf_share_layers=False)
            train_kwargs.update(lr=7e-4, clip_param=0.2, entropy_coeff=0.01, vf_loss_coeff=1.0, grad_clip=10.0,
                                use_kl_loss=False)
        return config.env_runners(**runner_kwargs).training(**train_kwargs).rl_module(model_config=model)

    if args.task == "pong":  # tuned_examples/ppo/pong_ppo.py (its lr without the GPU factor)
        return (config.training(lambda_=0.95, kl_coeff=0.5, clip_param=0.1, vf_clip_param=10.0, entropy_coeff=0.01,
                                num_epochs=10, lr=0.00015, grad_clip=100.0, grad_clip_by="global_norm")
                .env_runners(num_env_runners=cores)
                .rl_module(model_config=DefaultModelConfig(
                    vf_share_layers=True, conv_filters=[[16, 4, 2], [32, 4, 2], [64, 4, 2], [128, 4, 2]],
                    conv_activation="relu", head_fcnet_hiddens=[256])))
    if args.task == "halfcheetah":  # tuned_examples/ppo/benchmark_ppo_mujoco.py
        return (config.env_runners(num_env_runners=cores, num_envs_per_env_runner=32 // cores,
                                   rollout_fragment_length=512)
                .training(gamma=0.99, lambda_=0.95, lr=0.0003, num_epochs=15, train_batch_size_per_learner=32 * 512,
                          minibatch_size=4096, vf_loss_coeff=0.01)
                .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[64, 64], fcnet_activation="tanh",
                                                           vf_share_layers=True)))
    # examples/multi_agent/pettingzoo_parameter_sharing.py
    return (config.env_runners(num_env_runners=cores).training(vf_loss_coeff=0.005)
            .rl_module(model_config=DefaultModelConfig(vf_share_layers=True)))


def private_ray(tmp: str, cores: int) -> None:
    """A single-node Ray on loopback, its files and token under `tmp`."""
    import secrets

    import ray

    token = os.path.join(tmp, "auth_token")
    with open(os.open(token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write(secrets.token_hex(32))
    os.environ.pop("RAY_AUTH_TOKEN", None)
    os.environ["RAY_AUTH_TOKEN_PATH"] = token
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    ray.init(address="local", num_cpus=cores, include_dashboard=False, _node_ip_address="127.0.0.2",
             _temp_dir=os.path.join(tmp, "ray"), log_to_driver=False, configure_logging=False)


def main(argv=None) -> int:
    args = parse_args(__doc__.split("\n\n")[0], argv)
    exit_on_sigterm()

    import shutil
    import tempfile

    import ray
    from ray import tune

    cores = len(os.sched_getaffinity(0))
    tune.register_env("pong", make_pong)
    tune.register_env("spread", make_spread)
    config = build_config(args, cores)
    announce("rllib", ray.__version__, settings={
        k: getattr(config, k) for k in ("num_env_runners", "num_envs_per_env_runner", "rollout_fragment_length",
                                        "train_batch_size_per_learner", "minibatch_size", "num_epochs", "lr")})
    progress = Progress()
    tmp = tempfile.mkdtemp(prefix="rl-")
    algo = None
    try:
        private_ray(tmp, cores)
        algo = config.build_algo()
        divide = N_AGENTS if args.task == "spread" else 1
        progress.report(0, force=True, boundary=True)
        score = None
        while time.time() - T0 < args.max_seconds:
            result = algo.train()
            runners = result.get("env_runners", {})
            frames = runners.get("num_env_steps_sampled_lifetime", result.get("num_env_steps_sampled_lifetime", 0))
            # The mean of the last 100 episodes is only in results of iterations that finished one.
            score = runners.get("episode_return_mean", score)
            progress.report(frames, score=None if score is None else score / divide,
                            episodes=runners.get("num_episodes_lifetime", 0), force=True, boundary=True)
    finally:
        if algo is not None:
            algo.stop()
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
