"""Play a trained policy: episodes of a run's env with a checkpoint's weights, no training.

Every agent acts with one *source* of actions, chosen by the prefix of its id:

- `latest`: the run's newest valid checkpoint (the default for every agent);
- `initial`: the untrained network, initialised from the config's seed;
- `random`: uniformly random actions;
- a path to a `ckpt-*.pt` file.

So `evaluate(run, agents={"seeker": "latest", "hider": "initial"})` pits trained seekers
against untrained hiders: the cross-play that tells who learned what in a two-team game.
The reported return is the env's episode return (for a team game, the scored agents').
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from srl.api.config import read_config_file
from srl.api.env import spaces_of
from srl.api.policy import Policy
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.envs.render import RecordingEnv, Video, headless_rendering
from srl.envs.slots import EnvSlot, SlotStep
from srl.workers import checkpoint
from srl.workers.components import make_env, make_policy

SOURCES = ("latest", "initial", "random")


@dataclass
class Evaluation:
    episodes: int
    return_mean: float
    return_stderr: float
    length_mean: float
    env_steps: int
    #: agent id -> the source it acted with (a checkpoint by its file name)
    agents: dict[str, str]

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def policy_for(source: str, run_dir: Path, config: dict[str, Any], spaces: tuple) -> tuple[Policy, str]:
    """The run's policy acting with `source` (one of `SOURCES` or a checkpoint path), and its label."""
    import torch

    if source == "random":
        return make_policy({"type": "random", "args": {"seed": config.get("seed", 0)}}, *spaces), "random"
    torch.manual_seed(int(config.get("seed", 0)))  # seeded as the trainer seeds its own network
    policy = make_policy(config["policy"], *spaces)
    if source == "initial":
        return policy, "initial"
    path = checkpoint.latest(run_dir / "checkpoints") if source == "latest" else Path(source)
    if path is None:
        raise ValueError(f"{run_dir / 'checkpoints'} holds no valid checkpoint to evaluate")
    if not path.is_file():
        raise ValueError(f"checkpoint {path} does not exist (a source is latest, initial, random or a ckpt-*.pt path)")
    policy.load_state_dict(checkpoint.load(path)["policy"])
    return policy, path.name


def _row_sources(agent_ids: tuple[str, ...], agents: Mapping[str, str]) -> dict[str, str]:
    """Each agent's source: the longest matching prefix in `agents`, else `latest`."""
    unmatched = [p for p in agents if not any(a.startswith(p) for a in agent_ids)]
    if unmatched:
        raise ValueError(f"agent prefix {unmatched[0]!r} matches none of the env's agents {list(agent_ids)}")
    chosen = {}
    for agent in agent_ids:
        prefixes = sorted((p for p in agents if agent.startswith(p)), key=len, reverse=True)
        chosen[agent] = agents[prefixes[0]] if prefixes else "latest"
    return chosen


def evaluate(run_dir: str | Path, episodes: int = 100, envs: int = 8, agents: Mapping[str, str] | None = None,
             deterministic: bool = False, seed: int = 10_000, video: Video | None = None) -> Evaluation:
    """Play `episodes` episodes over `envs` envs stepped together; returns the mean episode return.

    With `video`, the first env also renders its first `video.episodes` episodes to a file
    (the evaluation goes on until they are over); an env that cannot render raises ValueError
    before any step.
    """
    import torch

    torch.set_num_threads(1)  # small batches: more threads only contend (as in the workers)
    run_dir = Path(run_dir)
    config = read_config_file(str(run_dir / "config.yaml"))
    env_config = config["env"]
    name = str(env_config.get("id") or env_config["type"])
    if video is not None:
        headless_rendering()  # before any env imports MuJoCo or pygame
    made = [make_env(env_config, render=video is not None and j == 0) for j in range(envs)]
    recorder = None
    if video is not None:
        made[0] = recorder = video.record(made[0], name)
    slot = EnvSlot(made, [seed + j for j in range(envs)], name)
    try:
        chosen = _row_sources(slot.agents, agents or {})
        policies: dict[str, Policy] = {}
        labels: dict[str, str] = {}
        for source in sorted(set(chosen.values())):
            policies[source], labels[source] = policy_for(source, run_dir, config, spaces_of(made[0]))
        # rows are env-major, then agent: row j * n_agents + a is agent a of env j
        rows_of = {source: np.array([r for r in range(slot.rows) if chosen[slot.agents[r % slot.n_agents]] == source])
                   for source in policies}
        return _play(slot, policies, rows_of, episodes, deterministic, {a: labels[chosen[a]] for a in slot.agents},
                     recorder)
    finally:
        slot.close()


def _play(slot: EnvSlot, policies: dict[str, Policy], rows_of: dict[str, np.ndarray], episodes: int,
          deterministic: bool, labels: dict[str, str], recorder: RecordingEnv | None = None) -> Evaluation:
    obs = NamedArray({k: np.zeros((slot.rows, *shape), dtype) for k, (shape, dtype) in slot.obs_fields.items()})
    alive = np.ones(slot.rows, bool)
    slot.reset_all(obs, alive)
    states = {s: p.initial_state(len(rows_of[s])) for s, p in policies.items()}
    actions = None
    out = SlotStep(np.zeros(slot.rows, np.float32), np.zeros(slot.rows, bool), np.zeros(slot.rows, bool), alive, obs)
    finished: list[tuple[float, int]] = []
    steps = 0
    while len(finished) < episodes or (recorder is not None and not recorder.done):
        for source, policy in policies.items():
            rows = rows_of[source]
            reply = policy.rollout(obs[rows], states[source], deterministic=deterministic)
            if actions is None:
                actions = np.zeros((slot.rows, *reply[keys.ACTION].shape[1:]), reply[keys.ACTION].dtype)
            actions[rows] = reply[keys.ACTION]
            states[source] = reply[keys.RNN_STATE] if keys.RNN_STATE in reply else states[source]
        out.reset_rows.clear()
        finished.extend(slot.step(actions, out))  # writes the next observations into `obs`
        steps += slot.n_envs
        if out.reset_rows:
            reset = set(out.reset_rows)
            for source, policy in policies.items():
                local = [i for i, r in enumerate(rows_of[source]) if r in reset]
                if local and states[source].keys():
                    states[source][np.asarray(local)] = policy.initial_state(len(local))
    returns = np.array([r for r, _ in finished[:episodes]])
    lengths = np.array([n for _, n in finished[:episodes]])
    stderr = float(returns.std(ddof=1) / math.sqrt(len(returns))) if len(returns) > 1 else float("nan")
    return Evaluation(len(returns), float(returns.mean()), stderr, float(lengths.mean()), steps, labels)
