"""Play a trained policy: episodes of a run's env with a checkpoint's weights, no training.

Every agent acts with one *source* of actions, chosen by the prefix of its id:

- `latest`: the run's newest valid checkpoint (the default for every agent);
- `best`: the checkpoint an evaluation worker kept for its best score (`evaluation:` in the
  config; it holds the policy only, which is all playing needs);
- `initial`: the untrained network, initialised from the config's seed;
- `random`: uniformly random actions;
- a path to a `ckpt-*.pt` file.

So `evaluate(run, agents={"seeker": "latest", "hider": "initial"})` pits trained seekers
against untrained hiders: the cross-play that tells who learned what in a two-team game.
The reported return is the env's episode return (for a team game, the scored agents').
The loop itself (`srl.workers.play`) is shared with the evaluation worker that scores a run
as it trains.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from srl.api.config import read_config_file
from srl.api.env import spaces_of
from srl.api.policy import Policy
from srl.envs.render import Video, headless_rendering
from srl.envs.slots import EnvSlot
from srl.workers import checkpoint
from srl.workers.components import make_env, make_policy
from srl.workers.play import Evaluation, play

SOURCES = ("latest", "best", "initial", "random")


def policy_for(source: str, run_dir: Path, config: dict[str, Any], spaces: tuple) -> tuple[Policy, str]:
    """The run's policy acting with `source` (one of `SOURCES` or a checkpoint path), and its label."""
    import torch

    if source == "random":
        return make_policy({"type": "random", "args": {"seed": config.get("seed", 0)}}, *spaces), "random"
    torch.manual_seed(int(config.get("seed", 0)))  # seeded as the trainer seeds its own network
    policy = make_policy(config["policy"], *spaces)
    if source == "initial":
        return policy, "initial"
    if source == "best":
        path = checkpoint.tagged(run_dir / "checkpoints", "best")
        if path is None:
            raise ValueError(f"{run_dir / 'checkpoints'} holds no valid best checkpoint (an evaluation worker "
                             "writes it: evaluation.count=1)")
    else:
        path = checkpoint.latest(run_dir / "checkpoints") if source == "latest" else Path(source)
    if path is None:
        raise ValueError(f"{run_dir / 'checkpoints'} holds no valid checkpoint to evaluate")
    if not path.is_file():
        raise ValueError(f"checkpoint {path} does not exist (a source is latest, best, initial, random or a ckpt-*.pt path)")
    policy.load_state_dict(checkpoint.load(path)["policy"])
    return policy, path.name


def _row_sources(agent_ids: tuple[str, ...], agents: Mapping[str, str], default: str = "latest") -> dict[str, str]:
    """Each agent's source: the longest matching prefix in `agents`, else `default`."""
    unmatched = [p for p in agents if not any(a.startswith(p) for a in agent_ids)]
    if unmatched:
        raise ValueError(f"agent prefix {unmatched[0]!r} matches none of the env's agents {list(agent_ids)}")
    chosen = {}
    for agent in agent_ids:
        prefixes = sorted((p for p in agents if agent.startswith(p)), key=len, reverse=True)
        chosen[agent] = agents[prefixes[0]] if prefixes else default
    return chosen


def evaluate(run_dir: str | Path, episodes: int = 100, envs: int = 8, agents: Mapping[str, str] | None = None,
             deterministic: bool = False, seed: int = 10_000, video: Video | None = None,
             default_source: str = "latest") -> Evaluation:
    """Play `episodes` episodes over `envs` envs stepped together; returns the mean episode return.

    Agents that no prefix of `agents` names act with `default_source`.

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
        chosen = _row_sources(slot.agents, agents or {}, default_source)
        policies: dict[str, Policy] = {}
        labels: dict[str, str] = {}
        for source in sorted(set(chosen.values())):
            policies[source], labels[source] = policy_for(source, run_dir, config, spaces_of(made[0]))
        # rows are env-major, then agent: row j * n_agents + a is agent a of env j
        rows_of = {source: np.array([r for r in range(slot.rows) if chosen[slot.agents[r % slot.n_agents]] == source])
                   for source in policies}
        return play(slot, policies, rows_of, episodes, deterministic, {a: labels[chosen[a]] for a in slot.agents},
                    recorder)
    finally:
        slot.close()
