"""Peer benchmark: Stable-Baselines3 PPO on CartPole-v1, trained until it is solved.

Runs in its own venv (see setup_sb3.sh), never in the project's:

    PY=$(bash benchmarks/peers/setup_sb3.sh)
    $PY benchmarks/peers/sb3_ppo.py --json sb3.json

Settings mirror the tuned `srl train cartpole-ppo`: 8 envs (DummyVecEnv), n_steps=128
(1024 steps a rollout), batch_size=256 (4 minibatches), n_epochs=4, a 64-64 tanh MLP,
lr 1e-3, gamma 0.99, gae_lambda 0.95, clip 0.2, ent_coef 0.0, on CPU with one torch thread.
Training stops as soon as the mean return of the last 100 finished episodes reaches
--target (with at least 10 episodes finished, SRL's rule), or after --max-steps.

wall_time_s counts from process start, imports included; train_time_s is learn() alone;
steps_per_s is env_steps / train_time_s.
"""

import time

T0 = time.perf_counter()  # first thing: wall time includes every import below

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402

RETURN_WINDOW = 100  # episodes in the running mean, as SRL's controller
MIN_EPISODES = 10  # SRL stops on the window only once it holds min(100, 10) episodes


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", type=float, default=475.0, help="stop at this mean return of the last 100 episodes")
    p.add_argument("--max-steps", type=int, default=1_000_000, help="stop after this many env steps")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default 1)")
    p.add_argument("--seed", type=int, default=None, help="seed for SB3 (default: random)")
    p.add_argument("--json", metavar="FILE", help="also write the result as JSON to FILE")
    p.add_argument("--smoke", action="store_true", help="2000 steps only, to check the setup")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)

    import numpy as np
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv

    torch.set_num_threads(args.threads if args.threads else 1)
    max_steps = 2000 if args.smoke else args.max_steps

    class StopAtReturn(BaseCallback):
        """Stops learn() the step the Monitor window of finished episodes reaches the target."""

        def __init__(self, target: float) -> None:
            super().__init__()
            self.target = target
            self.reached = False

        def _on_step(self) -> bool:
            episodes = self.model.ep_info_buffer  # Monitor's {"r", "l", "t"}, last 100 episodes
            if len(episodes) >= MIN_EPISODES and np.mean([e["r"] for e in episodes]) >= self.target:
                self.reached = True
                return False
            return True

    env = make_vec_env("CartPole-v1", n_envs=8, seed=args.seed, vec_env_cls=DummyVecEnv)
    model = PPO(
        "MlpPolicy",
        env,
        learning_rate=args.lr,
        n_steps=128,
        batch_size=256,
        n_epochs=4,
        gamma=0.99,
        gae_lambda=0.95,
        clip_range=0.2,
        ent_coef=0.0,
        policy_kwargs=dict(net_arch=[64, 64]),
        stats_window_size=RETURN_WINDOW,
        device="cpu",
        seed=args.seed,
        verbose=0,
    )
    callback = StopAtReturn(args.target)

    t_train = time.perf_counter()
    model.learn(total_timesteps=max_steps, callback=callback, progress_bar=False)
    now = time.perf_counter()
    train_time = now - t_train
    env.close()

    episodes = model.ep_info_buffer
    env_steps = int(model.num_timesteps)
    result = {
        "library": "stable-baselines3",
        "wall_time_s": round(now - T0, 3),
        "train_time_s": round(train_time, 3),
        "env_steps": env_steps,
        "steps_per_s": round(env_steps / max(train_time, 1e-9), 1),
        "episode_return_mean": round(float(np.mean([e["r"] for e in episodes])), 2) if episodes else None,
        "episodes": len(episodes),
        "reached": callback.reached,
    }
    text = json.dumps(result)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
