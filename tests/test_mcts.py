"""Batched MCTS (srl/search/mcts.py) with models that know the game exactly: it finds what search should find."""

import numpy as np
import pytest

from srl.search.mcts import SearchConfig, _considered_visits, search, select_action


class Bandit:
    """One step, then nothing: action a pays `payoffs[a]`. Uninformed priors and values."""

    def __init__(self, payoffs):
        self.payoffs = np.asarray(payoffs, np.float64)

    def initial(self, obs):
        n = len(obs)
        return np.zeros((n, 1)), np.zeros((n, len(self.payoffs))), np.zeros(n)

    def recurrent(self, hidden, action):
        n = len(action)
        ended = hidden[:, 0] > 0  # a step after the end pays nothing
        reward = np.where(ended, 0.0, self.payoffs[action])
        return np.ones((n, 1)), reward, np.zeros((n, len(self.payoffs))), np.zeros(n)


_LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]


class TicTacToe:
    """The game itself as a model: hidden = [the mover's 9 cells, the other's 9, game over]; a
    move that wins pays the mover 1; an occupied cell loses (-1); values and priors say nothing."""

    def initial(self, boards):
        return np.asarray(boards, np.float64), np.zeros((len(boards), 9)), np.zeros(len(boards))

    def recurrent(self, hidden, action):
        out = hidden.copy()
        reward = np.zeros(len(action))
        for i, (h, a) in enumerate(zip(hidden, action)):
            mine, theirs, over = h[:9].copy(), h[9:18], h[18]
            if over:
                continue
            if mine[a] or theirs[a]:
                reward[i], out[i, 18] = -1.0, 1.0
                continue
            mine[a] = 1
            won = any(all(mine[j] for j in line) for line in _LINES)
            reward[i] = 1.0 if won else 0.0
            full = (mine + theirs).sum() == 9
            out[i] = np.concatenate([theirs, mine, [1.0 if won or full else 0.0]])  # the other player moves next
        return out, reward, np.zeros((len(action), 9)), np.zeros(len(action))


def _board(mine, theirs):
    h = np.zeros(19)
    h[list(mine)] = 1
    h[[9 + c for c in theirs]] = 1
    return h


def test_a_one_step_search_finds_the_best_payoff_and_its_value():
    result = search(Bandit([0.1, 1.0, 0.5]), np.zeros((2, 1)), None, SearchConfig(simulations=30), np.random.default_rng(0),
                    noise=False)
    assert (result.visits.argmax(-1) == 1).all() and result.visits.sum(-1).tolist() == [30, 30]
    assert np.allclose(result.q, [[0.1, 1.0, 0.5]] * 2)
    # The root's value: its prior value (0) and every simulation's return, mostly the best action's.
    assert result.value[0] == pytest.approx((result.visits[0] * [0.1, 1.0, 0.5]).sum() / 31)


def test_illegal_root_actions_are_never_searched_nor_given_noise():
    legal = np.array([[1, 0, 1], [1, 1, 1]])
    result = search(Bandit([0.1, 1.0, 0.5]), np.zeros((2, 1)), legal, SearchConfig(simulations=20), np.random.default_rng(0))
    assert result.visits[0, 1] == 0 and result.visits[0].argmax() == 2 and result.prior[0, 1] == 0
    assert (result.prior[1] > 0).all() and result.prior[1].sum() == pytest.approx(1.0)


def test_two_player_search_takes_a_win_and_blocks_the_other_players():
    config = SearchConfig(simulations=300, discount=1.0, two_player=True)
    win = _board(mine=[0, 1], theirs=[3, 4])             # x x . / o o . / . . .  x to move: 2 wins
    block = _board(mine=[0, 8], theirs=[3, 4])           # o threatens 5: x must block
    legal = np.stack([1 - h[:9] - h[9:18] for h in (win, block)])
    result = search(TicTacToe(), np.stack([win, block]), legal, config, np.random.default_rng(0), noise=False)
    assert result.visits[0].argmax() == 2 and result.q[0, 2] == pytest.approx(1.0)
    assert result.visits[1].argmax() == 5
    assert result.q[1, 5] > result.q[1, 1]  # any other move loses at once


def test_each_tree_is_searched_as_if_alone():
    boards = np.stack([_board([0, 1], [3, 4]), _board([4], [0]), _board([], [])])
    config = SearchConfig(simulations=40, two_player=True)
    together = search(TicTacToe(), boards, None, config, np.random.default_rng(0), noise=False)
    for i in range(3):
        alone = search(TicTacToe(), boards[i:i + 1], None, config, np.random.default_rng(0), noise=False)
        assert np.array_equal(alone.visits[0], together.visits[i]) and np.allclose(alone.q[0], together.q[i])


def test_actions_follow_the_visits_and_temperature_zero_takes_the_most_visited():
    rng = np.random.default_rng(0)
    visits = np.tile([10, 30, 60], (20_000, 1))
    drawn = select_action(visits, 1.0, rng)
    assert np.allclose(np.bincount(drawn, minlength=3) / len(drawn), [0.1, 0.3, 0.6], atol=0.015)
    assert (select_action(visits, 0.0, rng) == 2).all()
    ties = select_action(np.tile([5, 5, 0], (1000, 1)), 0.0, rng)
    assert set(ties.tolist()) == {0, 1}


def test_sequential_halving_gives_each_candidate_an_equal_share_then_halves_them():
    # 4 candidates, 12 simulations: one visit each, then the best two share what is left.
    assert _considered_visits(4, 12).tolist() == [0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert _considered_visits(2, 6).tolist() == [0, 0, 1, 1, 2, 2]
    assert _considered_visits(1, 3).tolist() == [0, 1, 2]
    assert _considered_visits(16, 16).tolist() == [0] * 16  # a budget of one visit each


def test_gumbel_search_finds_the_best_payoff_with_few_simulations_and_its_policy_improves_on_the_prior():
    payoffs = [0.1, 1.0, 0.5, 0.3]
    config = SearchConfig(simulations=8, gumbel=True)
    result = search(Bandit(payoffs), np.zeros((200, 1)), None, config, np.random.default_rng(0), noise=False)
    # Every action is tried once at least (4 candidates, 8 simulations): without noise the best
    # one is picked every time; with it, the pick is a draw that mostly falls on the best.
    assert (result.action == 1).all()
    assert np.allclose(result.improved.sum(-1), 1.0) and (result.improved.argmax(-1) == 1).all()
    noisy = search(Bandit(payoffs), np.zeros((400, 1)), None, config, np.random.default_rng(0))
    assert 0.85 < (noisy.action == 1).mean() < 1.0
    # The improved policy ranks the actions as their payoffs do (the prior was uniform).
    assert (np.argsort(result.improved.mean(0)) == np.argsort(payoffs)).all()
    # With two simulations, only two candidates (drawn by the Gumbel noise) are tried; the pick is
    # one of them, mostly the better, and over many roots every action gets considered.
    two = search(Bandit(payoffs), np.zeros((400, 1)), None, SearchConfig(simulations=2, gumbel=True),
                 np.random.default_rng(1))
    assert (two.visits.sum(-1) == 2).all() and (two.visits.max(-1) == 1).all()
    tried = two.visits > 0
    best_tried = np.where(tried, payoffs, -1).argmax(-1)
    assert tried[np.arange(400), two.action].all() and tried.any(0).all()
    assert (two.action == best_tried).mean() > 0.8


def test_gumbel_search_never_tries_nor_picks_an_illegal_root_action():
    legal = np.array([[1, 0, 1, 0], [0, 0, 0, 1], [1, 1, 1, 1]])
    rows = np.repeat(legal, 100, 0)
    result = search(Bandit([0.1, 1.0, 0.5, 0.3]), np.zeros((300, 1)), rows, SearchConfig(simulations=10, gumbel=True),
                    np.random.default_rng(0))
    assert (result.visits[rows == 0] == 0).all() and (result.improved[rows == 0] == 0).all()
    assert rows[np.arange(300), result.action].all()
    assert np.allclose(result.improved.sum(-1), 1.0)


def test_gumbel_two_player_search_takes_a_win_and_blocks():
    config = SearchConfig(simulations=200, discount=1.0, two_player=True, gumbel=True)
    boards = np.stack([_board(mine=[0, 1], theirs=[3, 4]), _board(mine=[0, 8], theirs=[3, 4])])
    legal = (boards[:, :9] + boards[:, 9:18]) == 0
    result = search(TicTacToe(), boards, legal, config, np.random.default_rng(0), noise=False)
    assert result.action.tolist() == [2, 5]
    assert result.improved[0].argmax() == 2 and result.improved[1].argmax() == 5
