"""Games between two teams of an env's agents, each played by a policy, counted as won,
drawn or lost from the first team's side.

    seats = split_agents(env.agent_ids, ["player_0"])          # (learner agents, opponent agents)
    result = play_games(envs, seats, learner, opponent, games=32, seed=7)
    result.wins, result.draws, result.losses, result.scores    # scores: 1 / 0.5 / 0 per game, in order

Who won: the last step's info `winner` when the env gives it (an agent id or a list of them,
None for a draw), else the team with the larger return (the sum of its agents' rewards).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from srl.api.env import WINNER, AgentStep, Env
from srl.api.policy import Policy
from srl.data import keys
from srl.data.named_array import NamedArray


def split_agents(agent_ids: Sequence[str], learner: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the learner's agents, the opponents'): the ids some pattern of `learner` matches (fnmatch), and the rest."""
    mine = [a for a in agent_ids if any(fnmatch.fnmatchcase(a, p) for p in learner)]
    if not mine or len(mine) == len(agent_ids):
        raise ValueError(f"self_play.learner: {list(learner)} must match some of the env's agents "
                         f"{list(agent_ids)}, not {'none' if not mine else 'all'} (the rest are the opponents)")
    return mine, [a for a in agent_ids if a not in mine]


@dataclass
class Games:
    """Results from the learner's side, in the order the games ended."""

    scores: list[float] = field(default_factory=list)

    @property
    def wins(self) -> int:
        return sum(s == 1.0 for s in self.scores)

    @property
    def draws(self) -> int:
        return sum(s == 0.5 for s in self.scores)

    @property
    def losses(self) -> int:
        return sum(s == 0.0 for s in self.scores)


def outcome(last: dict[str, AgentStep], returns: dict[str, float], mine: Sequence[str]) -> float:
    """1 the learner's team won, 0.5 a draw, 0 lost: from the info's `winner`, else the team returns."""
    for step in last.values():
        if WINNER in step.info:
            winner = step.info[WINNER]
            if winner is None:
                return 0.5
            winners = {winner} if isinstance(winner, str) else set(winner)
            return 1.0 if winners & set(mine) else 0.0
    ours = sum(returns[a] for a in mine)
    theirs = sum(r for a, r in returns.items() if a not in mine)
    return 1.0 if ours > theirs else 0.5 if ours == theirs else 0.0


def play_games(envs: Sequence[Env], seats: tuple[Sequence[str], Sequence[str]], learner: Policy, opponent: Policy,
               games: int, seed: int, deterministic: bool = False) -> Games:
    """Play `games` games over `envs` stepped together (env j plays `(games + j) // len(envs)` of them,
    reset with seed `seed + j`), the learner's agents acting with `learner`, the others with `opponent`."""
    sides = [(learner, list(seats[0])), (opponent, list(seats[1]))]
    share = [(games + j) // len(envs) for j in range(len(envs))]
    steps = [env.reset(seed=seed + j) for j, env in enumerate(envs)]
    returns = [dict.fromkeys(env.agent_ids, 0.0) for env in envs]
    done = [dict.fromkeys(env.agent_ids, False) for env in envs]
    states = [policy.initial_state(len(envs) * len(agents)) for policy, agents in sides]
    result = Games()
    while len(result.scores) < games:
        actions: list[dict[str, np.ndarray]] = [{} for _ in envs]
        for s, (policy, agents) in enumerate(sides):
            fields = steps[0][agents[0]].obs.keys()
            obs = NamedArray({k: np.stack([steps[j][a].obs[k] for j in range(len(envs)) for a in agents])
                              for k in fields})
            reply = policy.rollout(obs, states[s], deterministic=deterministic)
            if keys.RNN_STATE in reply:
                states[s] = reply[keys.RNN_STATE]
            for j in range(len(envs)):
                for i, a in enumerate(agents):
                    actions[j][a] = reply[keys.ACTION][j * len(agents) + i]
        for j, env in enumerate(envs):
            now = env.step(actions[j])
            for a, step in now.items():
                if not done[j][a]:
                    returns[j][a] += step.reward
                    done[j][a] = step.done
                    steps[j][a] = step  # a finished agent keeps its last step until the env resets
            if all(done[j].values()):
                if share[j] > 0 and len(result.scores) < games:
                    share[j] -= 1
                    result.scores.append(outcome(now, returns[j], seats[0]))
                steps[j] = env.reset()
                returns[j] = dict.fromkeys(env.agent_ids, 0.0)
                done[j] = dict.fromkeys(env.agent_ids, False)
                for s, (policy, agents) in enumerate(sides):
                    if states[s].keys():
                        rows = np.arange(j * len(agents), (j + 1) * len(agents))
                        states[s][rows] = policy.initial_state(len(agents))
    return result
