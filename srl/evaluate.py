"""Play a trained policy: episodes of a run's env with a checkpoint's weights, no training.

Every agent acts with one *source* of actions, chosen by the prefix of its id:

- `latest`: the run's newest valid checkpoint (the default for every agent);
- `best`: the checkpoint an evaluation worker kept for its best score (`evaluation:` in the
  config; it holds the policy only, which is all playing needs);
- `initial`: the untrained network, initialised from the config's seed;
- `random`: uniformly random actions;
- a path to a `ckpt-*.pt` file;
- a player from a Python file, `FILE.py:NAME`: `NAME(observation_space, action_space)` returns
  an `srl.api.Policy` (a fixed opponent such as a search player: benchmarks/board_players.py).

So `evaluate(run, agents={"seeker": "latest", "hider": "initial"})` pits trained seekers
against untrained hiders: the cross-play that tells who learned what in a two-team game.
In a run of several policies each agent plays its own policy, and a source names that
policy's checkpoints (`checkpoints/<policy>/`): `latest` is the seekers' newest for a seeker.
The reported return is the env's episode return (for a team game, the scored agents').
The loop itself (`srl.workers.play`) is shared with the evaluation worker that scores a run
as it trains.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from srl.api.agents import AgentRouter
from srl.api.components import make_env, make_policy
from srl.api.config import ExperimentConfig, run_config
from srl.api.policy import Policy
from srl.api.run_paths import RunPaths
from srl.envs.render import Video, headless_rendering
from srl.envs.slots import EnvSlot
from srl.learn import checkpoint
from srl.workers.play import Evaluation, play

SOURCES = ("latest", "best", "initial", "random")


def policy_for(source: str, run_dir: Path, config: ExperimentConfig, spaces: tuple,
               policy_name: str | None = None, allow_non_finite: bool = False) -> tuple[Policy, str]:
    """The run's policy acting with `source` (one of `SOURCES` or a checkpoint path), and its label.

    A run of several policies keeps each one's checkpoints in `checkpoints/<policy_name>/`. A
    checkpoint whose weights hold NaN or infinity is refused unless `allow_non_finite`: its
    actions would be meaningless, and a score from them misleading.
    """
    import torch

    if config.policies and policy_name not in config.policies:
        raise ValueError(f"{run_dir} trains several policies ({', '.join(config.policies)}); playing or "
                         "exporting one of them alone is not supported yet")
    checkpoints = RunPaths(run_dir).checkpoints(policy_name)
    section = config.policies[policy_name].policy if policy_name else config.policy

    if source == "random":
        return make_policy({"type": "random", "args": {"seed": config.seed}}, *spaces), "random"
    if is_player_file(source):
        return player_from_file(source, spaces)
    torch.manual_seed(config.seed)  # seeded as the trainer seeds its own network
    policy = make_policy(section, *spaces)
    if source == "initial":
        return policy, "initial"
    if source == "best":
        path = checkpoint.tagged(checkpoints, "best")
        if path is None:
            raise ValueError(f"{checkpoints} holds no valid best checkpoint (an evaluation worker "
                             "writes it: evaluation.count=1)")
    else:
        path = checkpoint.latest(checkpoints) if source == "latest" else Path(source)
    if path is None:
        raise ValueError(f"{checkpoints} holds no valid checkpoint to evaluate")
    if not path.is_file():
        raise ValueError(f"checkpoint {path} does not exist (a source is latest, best, initial, random or a ckpt-*.pt path)")
    state = checkpoint.load(path).get("policy")
    if not isinstance(state, dict):
        raise ValueError(f"checkpoint {path} holds no policy state (a `policy` mapping)")
    if not allow_non_finite and not checkpoint.finite(state):
        raise ValueError(f"checkpoint {path} holds non-finite weights (NaN or infinity): refused "
                         "(srl evaluate --allow-non-finite plays it anyway)")
    try:
        policy.load_state_dict(state)
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:  # torch lists every mismatch: name the first
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()] or [""]
        first = next((line for line in lines if not line.startswith("Error(s) in loading")), lines[0])
        raise ValueError(f"checkpoint {path} does not fit the run's policy: {first[:300]}") from None
    return policy, path.name


def is_player_file(source: str) -> bool:
    """Whether `source` names a player in a Python file, `FILE.py:NAME`."""
    return re.fullmatch(r".+\.py:[A-Za-z_][\w.]*", source) is not None


def player_from_file(source: str, spaces: tuple) -> tuple[Policy, str]:
    """The player `FILE.py:NAME` builds for these (observation, action) spaces, and its label."""
    file, _, name = source.rpartition(":")
    path = Path(file)
    if not path.is_file():
        raise ValueError(f"player file {file} does not exist (a source FILE.py:NAME names a player in a Python file)")
    spec = importlib.util.spec_from_file_location(f"_srl_player_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    build = getattr(module, name, None)
    if not callable(build):
        raise ValueError(f"{file} has no player {name!r} (a callable taking the observation and action spaces)")
    player = build(*spaces)
    if not isinstance(player, Policy):
        raise ValueError(f"{source} built a {type(player).__name__}, not an srl.api.Policy")
    return player, f"{path.name}:{name}"


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
             default_source: str = "latest", allow_non_finite: bool = False) -> Evaluation:
    """Play `episodes` episodes over `envs` envs stepped together; returns the mean episode return.

    Agents that no prefix of `agents` names act with `default_source`. A checkpoint of non-finite
    weights raises ValueError unless `allow_non_finite`.

    With `video`, the first env also renders its first `video.episodes` episodes to a file
    (the evaluation goes on until they are over); an env that cannot render raises ValueError
    before any step.
    """
    from srl.workers.threads import compute_threads

    compute_threads(1)  # small batches: more threads only contend (as in the workers)
    run_dir = Path(run_dir)
    config = run_config(run_dir)
    env_config = config.env
    name = str(env_config.id or env_config.type)
    if video is not None:
        headless_rendering()  # before any env imports MuJoCo or pygame
    made = [make_env(env_config, render=video is not None and j == 0) for j in range(envs)]
    recorder = None
    if video is not None:
        made[0] = recorder = video.record(made[0], name)
    policy_of = None
    if config.policies:
        policy_of = AgentRouter.from_rules(made[0].agent_ids, [(r.match, r.policy) for r in config.agents],
                                           config.policies).policy_of
    slot = EnvSlot(made, [seed + j for j in range(envs)], name, policy_of=policy_of)
    try:
        chosen = _row_sources(slot.agents, agents or {}, default_source)
        players: dict[str, tuple[str, Policy, np.ndarray]] = {}
        labels: dict[str, str] = {}
        for policy_name, group in slot.groups.items():
            for source in sorted({chosen[a] for a in group.agents}):
                policy, label = policy_for(source, run_dir, config, group.spaces, policy_name or None,
                                           allow_non_finite)
                # the policy's rows are env-major, then its agents: row i is agent i % len(agents)
                rows = [i for i in range(group.rows) if chosen[group.agents[i % len(group.agents)]] == source]
                players[f"{policy_name}:{source}"] = (policy_name, policy, np.array(rows))
                # a label names the policy only where there are several
                labels.update({a: f"{policy_name}/{label}" if policy_of else label
                               for a in group.agents if chosen[a] == source})
        return play(slot, players, episodes, deterministic, {a: labels[a] for a in slot.agents}, recorder)
    finally:
        slot.close()
