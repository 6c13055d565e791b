"""Peer runner for side_by_side.py: Stable-Baselines3 PPO on Pong or HalfCheetah-v5.

Runs in its own venv (setup_sb3.sh), never in the project's; prints `@progress` lines
(peer_common.py) until --max-seconds or until the harness stops it:

    PY=$(bash benchmarks/peers/setup_sb3.sh)
    $PY benchmarks/peers/sb3_run.py --task halfcheetah --mode score --max-seconds 60

--mode throughput takes the matched update shape from --shape: `envs` envs in one
DummyVecEnv (SB3's default vectoriser), `rollout` steps each (n_steps), minibatches of
batch / minibatches rows, `epochs` epochs; the network is the one SRL's config uses (Pong:
SB3's NatureCNN with shared features and linear heads, exactly SRL's; HalfCheetah: separate
64-64 tanh actor and critic, a state-independent log-std starting at -0.5). Observations and
rewards are normalised (VecNormalize) on HalfCheetah, as SRL's config does.

--mode score runs the RL Baselines3 Zoo's tuned PPO for the task (hyperparams/ppo.yml: `atari`
for Pong, `HalfCheetah-v3` for HalfCheetah), unchanged.

Pong is ALE/Pong-v5 with frame skip 1 and no sticky actions, under SB3's AtariWrapper (no-op
starts, max-pooled frame skip 4, 84x84 gray, episodic life, fire on reset, clipped rewards)
and a 4-frame VecFrameStack: one step is 4 emulator frames, as in SRL. The score is Monitor's
episode return, the game score.
"""

import time

T0 = time.time()

import sys  # noqa: E402

from peer_common import Progress, announce, exit_on_sigterm, parse_args  # noqa: E402


def linear(start: float):
    """The Zoo's `lin_<value>`: from `start` down to 0 over the run."""
    return lambda progress_remaining: progress_remaining * start


def make_env(task: str, n_envs: int, seed: int, normalize: bool):
    import gymnasium as gym
    from stable_baselines3.common.env_util import make_atari_env, make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack, VecNormalize

    if task == "pong":
        import ale_py

        gym.register_envs(ale_py)
        env = make_atari_env("ALE/Pong-v5", n_envs=n_envs, seed=seed, vec_env_cls=DummyVecEnv,
                             env_kwargs={"frameskip": 1, "repeat_action_probability": 0.0})
        return VecFrameStack(env, n_stack=4)
    env = make_vec_env("HalfCheetah-v5", n_envs=n_envs, seed=seed, vec_env_cls=DummyVecEnv)
    return VecNormalize(env, gamma=0.99) if normalize else env


def model_settings(args) -> tuple[int, dict]:
    """(n_envs, PPO keyword arguments) for the task and mode."""
    from torch import nn

    if args.mode == "throughput":
        s = args.shape
        common = dict(n_steps=s["rollout"], batch_size=s["batch"] // s["minibatches"], n_epochs=s["epochs"],
                      gamma=0.99, gae_lambda=0.95)
        if args.task == "pong":  # as srl's pong-ppo
            return s["envs"], dict(common, policy="CnnPolicy", learning_rate=2.5e-4, clip_range=0.1,
                                   ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5)
        return s["envs"], dict(common, policy="MlpPolicy", learning_rate=3e-4, clip_range=0.2, ent_coef=0.0,
                               policy_kwargs=dict(net_arch=dict(pi=[64, 64], vf=[64, 64]), activation_fn=nn.Tanh,
                                                  log_std_init=-0.5))
    if args.task == "pong":  # the Zoo's `atari`
        return 8, dict(policy="CnnPolicy", n_steps=128, n_epochs=4, batch_size=256, learning_rate=linear(2.5e-4),
                       clip_range=linear(0.1), vf_coef=0.5, ent_coef=0.01)
    # the Zoo's `HalfCheetah-v3` (normalize: true)
    return 1, dict(policy="MlpPolicy", batch_size=64, n_steps=512, gamma=0.98, learning_rate=2.0633e-05,
                   ent_coef=0.000401762, clip_range=0.1, n_epochs=20, gae_lambda=0.92, max_grad_norm=0.8,
                   vf_coef=0.58096, policy_kwargs=dict(log_std_init=-2, ortho_init=False, activation_fn=nn.ReLU,
                                                       net_arch=dict(pi=[256, 256], vf=[256, 256])))


def main(argv=None) -> int:
    args = parse_args(__doc__.split("\n\n")[0], argv)
    if args.task == "spread":
        print("sb3 has no multi-agent PPO: it is not a peer on spread", file=sys.stderr)
        return 2
    exit_on_sigterm()

    import stable_baselines3
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback

    n_envs, kwargs = model_settings(args)
    announce("stable-baselines3", stable_baselines3.__version__, n_envs=n_envs,
             settings={k: (v if isinstance(v, (int, float, str)) else repr(v)) for k, v in kwargs.items()})
    env = make_env(args.task, n_envs, args.seed, normalize=args.task == "halfcheetah")
    model = PPO(env=env, device="cpu", seed=args.seed, verbose=0, stats_window_size=100, **kwargs)
    progress = Progress()

    class Report(BaseCallback):
        """Counts Monitor's finished episodes; a progress line at each iteration boundary
        (after the update, before the next rollout) and every second while sampling."""

        def _on_rollout_start(self) -> None:
            progress.report(self.model.num_timesteps, force=True, boundary=True)

        def _on_step(self) -> bool:
            for info in self.locals["infos"]:
                if "episode" in info:
                    progress.episode(info["episode"]["r"])
            progress.report(self.model.num_timesteps)
            return time.time() - T0 < args.max_seconds

    try:
        model.learn(total_timesteps=10**10, callback=Report(), progress_bar=False)
        progress.report(model.num_timesteps, force=True, boundary=True)
    finally:
        env.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
