"""Fixed search players for the bundled board games: the opponents a trained policy is measured against.

Each is an `srl.api.Policy` that reads the board from the observation alone (the PettingZoo
classic planes, from the mover's side: plane 0 its own pieces, plane 1 the other player's) and
searches the game's own rules, so `srl evaluate` can seat it like any other source:

    srl evaluate RUN --agents player_1=benchmarks/board_players.py:connect4_depth2
    srl evaluate RUN --agents player_0=benchmarks/board_players.py:tictactoe_perfect

- `tictactoe_perfect`: a full minimax (it never loses); among equally good moves it picks at random.
- `connect4_depth2` (`connect4_minimax(depth)`): a depth-limited negamax that sees wins and losses
  only (every other leaf scores 0): it takes a win in one, blocks a win in one and, at depth 2
  and more, avoids a move that lets the other player win at once; otherwise it moves at random
  among its best moves.

A row whose mask allows one action only (a player waiting for its turn, `srl.envs.turn_based`)
gets that action.
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium as gym
import numpy as np

from srl.api.policy import Policy
from srl.data import keys
from srl.data.named_array import NamedArray

# ---------------------------------------------------------------------------- tic-tac-toe
_LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]
_LINE_BITS = [sum(1 << i for i in line) for line in _LINES]


def _three(bits: int) -> bool:
    return any(bits & line == line for line in _LINE_BITS)


@functools.lru_cache(maxsize=None)
def _tictactoe_value(mine: int, theirs: int) -> int:
    """The game's value for the player to move (1 win, 0 draw, -1 loss) with perfect play."""
    free = [i for i in range(9) if not (mine | theirs) >> i & 1]
    if not free:
        return 0
    best = -1
    for i in free:
        after = mine | 1 << i
        value = 1 if _three(after) else -_tictactoe_value(theirs, after)
        best = max(best, value)
        if best == 1:
            break
    return best


def _tictactoe_scores(mine: int, theirs: int) -> dict[int, int]:
    return {i: (1 if _three(mine | 1 << i) else -_tictactoe_value(theirs, mine | 1 << i))
            for i in range(9) if not (mine | theirs) >> i & 1}


# ---------------------------------------------------------------------------- connect four
_ROWS, _COLUMNS = 6, 7
_HEIGHT = _ROWS + 1  # one spare bit per column keeps the shifts below from wrapping into the next


def _four(bits: int) -> bool:
    """A line of four in a bitboard (bit column * 7 + row, row 0 at the bottom)."""
    for shift in (1, _HEIGHT, _HEIGHT - 1, _HEIGHT + 1):
        pairs = bits & (bits >> shift)
        if pairs & (pairs >> 2 * shift):
            return True
    return False


def _negamax(mine: int, theirs: int, heights: tuple[int, ...], depth: int) -> int:
    """The value for the player to move, searched `depth` moves deep (1 win, -1 loss, 0 otherwise)."""
    best, moved = -1, False
    for column in range(_COLUMNS):
        if heights[column] == _ROWS:
            continue
        moved = True
        after = mine | 1 << (column * _HEIGHT + heights[column])
        if _four(after):
            return 1
        if depth > 1:
            raised = heights[:column] + (heights[column] + 1,) + heights[column + 1:]
            best = max(best, -_negamax(theirs, after, raised, depth - 1))
        else:
            best = max(best, 0)
    return best if moved else 0  # a full board: a draw


def _connect4_scores(board: np.ndarray, depth: int) -> dict[int, int]:
    """Each legal column's value after the mover plays it, `depth` moves deep in all."""
    mine = theirs = 0
    heights = []
    for column in range(_COLUMNS):
        height = 0
        for row in range(_ROWS - 1, -1, -1):  # observation row 0 is the top
            bit = 1 << (column * _HEIGHT + (_ROWS - 1 - row))
            if board[row, column, 0]:
                mine |= bit
            elif board[row, column, 1]:
                theirs |= bit
            else:
                break
            height += 1
        heights.append(height)
    heights = tuple(heights)
    scores = {}
    for column in range(_COLUMNS):
        if heights[column] == _ROWS:
            continue
        after = mine | 1 << (column * _HEIGHT + heights[column])
        if _four(after):
            scores[column] = 1
        elif depth > 1:
            raised = heights[:column] + (heights[column] + 1,) + heights[column + 1:]
            scores[column] = -_negamax(theirs, after, raised, depth - 1)
        else:
            scores[column] = 0
    return scores


# ---------------------------------------------------------------------------- the players
class SearchPlayer(Policy):
    """A policy that scores each legal move by search and plays one of the best at random."""

    def __init__(self, observation_space: gym.spaces.Dict, action_space: gym.Space, scores: Any,
                 seed: int = 0) -> None:
        if keys.ACTION_MASK not in observation_space.spaces:
            raise ValueError("a search player needs observations with an action_mask (env.type turn_based)")
        self.scores = scores
        self.rng = np.random.default_rng(seed)
        self.version = 0

    def initial_state(self, batch: int) -> NamedArray:
        return NamedArray()

    def rollout(self, obs: NamedArray, state: NamedArray, deterministic: bool = False) -> NamedArray:
        boards, masks = np.asarray(obs[keys.OBS]), np.asarray(obs[keys.ACTION_MASK])
        actions = np.zeros(len(masks), np.int64)
        for i, (board, mask) in enumerate(zip(boards, masks)):
            legal = np.flatnonzero(mask)
            if len(legal) <= 1:  # waiting for its turn, or a forced move
                actions[i] = legal[0] if len(legal) else 0
                continue
            scores = self.scores(board)
            best = max(scores[a] for a in legal)
            actions[i] = self.rng.choice([a for a in legal if scores[a] == best])
        zeros = np.zeros(len(actions), np.float32)
        return NamedArray({keys.ACTION: actions, keys.LOGPROB: zeros, keys.VALUE: zeros})

    def analyze(self, batch: Any, entropy: bool = True) -> Any:
        raise NotImplementedError("a search player does not train")

    def get_params(self) -> NamedArray:
        return NamedArray()

    def set_params(self, params: NamedArray, version: int) -> None:
        self.version = version


def _planes_to_bits(board: np.ndarray) -> tuple[int, int]:
    flat = board.reshape(9, 2)
    return (sum(1 << i for i in range(9) if flat[i, 0]), sum(1 << i for i in range(9) if flat[i, 1]))


def tictactoe_perfect(observation_space: gym.spaces.Dict, action_space: gym.Space) -> SearchPlayer:
    return SearchPlayer(observation_space, action_space, lambda board: _tictactoe_scores(*_planes_to_bits(board)))


def connect4_minimax(depth: int):
    def build(observation_space: gym.spaces.Dict, action_space: gym.Space) -> SearchPlayer:
        return SearchPlayer(observation_space, action_space, lambda board: _connect4_scores(board, depth))
    return build


connect4_depth1 = connect4_minimax(1)
connect4_depth2 = connect4_minimax(2)
connect4_depth4 = connect4_minimax(4)
