"""Monte Carlo tree search over a learned model (MuZero, Schrittwieser et al. 2020), for a batch
of roots at once: one tree per root, every array shaped [roots, nodes, ...], so a simulation is
a handful of NumPy operations over all roots and one batched model call.

The model is what MuZero learns (`Model`): `initial(obs)` encodes observations into hidden
states with a policy and a value; `recurrent(hidden, action)` steps a hidden state by an action
and predicts the reward, the next policy and value. Searching all of an actor's envs together
turns each simulation's expansions into one batch, the shape policy workers and the env ring
already serve.

    result = search(model, obs, legal, SearchConfig(simulations=50), rng)
    result.visits        # [roots, actions]: the improved policy is visits / visits.sum
    result.value         # [roots]: the root's searched value
    action = select_action(result.visits, temperature=1.0, rng=rng)

Each simulation descends from the root by pUCT (the paper's Appendix B, Q values normalised by
the smallest and largest seen in that tree), expands the first action not yet in the tree with
one `recurrent` call for every root, and backs the leaf's value up the path, discounting and
adding rewards. Legal-move masks apply at the root only (inside the tree the model has not seen
the game's rules, as in the paper); the root's prior is mixed with Dirichlet noise while
acting. With `two_player`, values are from the view of the player to move at each node and flip
sign at every ply (board games where the players alternate).

With `gumbel` (Gumbel MuZero, Danihelka et al. 2022), the root instead samples Gumbel noise g
and considers the m actions of largest g + logits, then halves them phase by phase over the
simulations (sequential halving), keeping those of largest g + logits + sigma(q); inside the
tree a node takes the action whose share of visits lags most behind the improved policy
softmax(logits + sigma(completed q)). The searched action is the surviving candidate of best
score and the policy target the root's improved policy, which improves on the prior even with
a handful of simulations, where visit counts say little. sigma(q) = (c_visit + max N) c_scale q
of Q values rescaled to [0, 1] by the tree's smallest and largest; an unvisited action's Q is completed by the node's
mixed value (its network value and the prior-weighted Q of the visited actions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


class Model(Protocol):
    """A learned model, batched: hidden states [B, ...], policy logits [B, actions], values and rewards [B]."""

    def initial(self, obs: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(hidden, logits, value) of observations."""

    def recurrent(self, hidden: np.ndarray, action: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                          np.ndarray]:
        """(next hidden, reward, logits, value) after `action` [B] from `hidden`."""


@dataclass(frozen=True)
class SearchConfig:
    simulations: int = 50
    discount: float = 0.997
    #: pUCT's exploration weight: c1 + log((N + c2 + 1) / c2), N the parent's visits (the paper's constants).
    pb_c_init: float = 1.25
    pb_c_base: float = 19_652.0
    #: Root noise while acting: prior = (1 - fraction) prior + fraction Dirichlet(alpha).
    dirichlet_alpha: float = 0.3
    exploration_fraction: float = 0.25
    #: Players alternate: each node's value is its mover's, and a child's counts negated for its parent.
    two_player: bool = False
    #: Gumbel MuZero's root and interior selection instead of pUCT (and no Dirichlet noise).
    gumbel: bool = False
    #: Gumbel: root actions considered at most (m), and sigma's constants.
    max_considered: int = 16
    c_visit: float = 50.0
    c_scale: float = 0.1


@dataclass
class SearchResult:
    visits: np.ndarray  # [B, A] visit counts of the root's actions
    value: np.ndarray  # [B] the root's value after search
    q: np.ndarray  # [B, A] each root action's value (0 where never visited)
    prior: np.ndarray  # [B, A] the root's prior, as searched (with noise, if any)
    #: Gumbel: the root's improved policy [B, A] and the searched action [B] (None without).
    improved: np.ndarray | None = None
    action: np.ndarray | None = None


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


class _Trees:
    """B trees of up to `nodes` nodes each; node 0 is the root, node i + 1 the one simulation i adds."""

    def __init__(self, roots: int, nodes: int, actions: int, hidden: np.ndarray) -> None:
        self.visits = np.zeros((roots, nodes), np.int32)
        self.value_sum = np.zeros((roots, nodes), np.float64)
        self.reward = np.zeros((roots, nodes), np.float64)
        self.prior = np.zeros((roots, nodes, actions), np.float64)
        self.children = np.full((roots, nodes, actions), -1, np.int32)
        self.hidden = np.zeros((roots, nodes, *hidden.shape[1:]), hidden.dtype)
        self.hidden[:, 0] = hidden
        #: Each node's value as the network predicted it (Gumbel's mixed value starts from it).
        self.net_value = np.zeros((roots, nodes), np.float64)
        # Per tree, the smallest and largest Q seen: pUCT compares normalised values.
        self.q_min = np.full(roots, np.inf)
        self.q_max = np.full(roots, -np.inf)

    def value(self, b: np.ndarray, node: np.ndarray) -> np.ndarray:
        n = self.visits[b, node]
        return np.where(n > 0, self.value_sum[b, node] / np.maximum(n, 1), 0.0)

    def actions_of(self, rows: np.ndarray, node: np.ndarray, discount: float,
                   sign: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per action of each tree's `node`, [B, A]: whether it has been tried, its visits and its
        Q from the node's side (0 where not tried)."""
        children = self.children[rows, node]
        tried = children >= 0
        child = np.maximum(children, 0)
        visits = np.where(tried, self.visits[rows[:, None], child], 0)
        q = np.where(tried, self.reward[rows[:, None], child] + discount * sign * self.value(rows[:, None], child), 0.0)
        return tried, visits, q


def search(model: Model, obs: Any, legal: np.ndarray | None, config: SearchConfig, rng: np.random.Generator,
           noise: bool = True) -> SearchResult:
    """Search `config.simulations` times from each root; `legal` [B, A] (0/1, None: all legal)."""
    hidden, logits, value = model.initial(obs)
    roots, actions = logits.shape
    trees = _Trees(roots, config.simulations + 1, actions, np.asarray(hidden))
    rows = np.arange(roots)
    prior = _softmax(np.asarray(logits, np.float64))
    if legal is not None:
        legal = np.asarray(legal).reshape(roots, actions) != 0
        prior = np.where(legal, prior, 0.0)
        prior /= np.maximum(prior.sum(-1, keepdims=True), 1e-12)
    if noise and config.exploration_fraction > 0 and not config.gumbel:
        dirichlet = rng.dirichlet(np.full(actions, config.dirichlet_alpha), roots)
        if legal is not None:
            dirichlet = np.where(legal, dirichlet, 0.0)
            dirichlet /= np.maximum(dirichlet.sum(-1, keepdims=True), 1e-12)
        prior = (1 - config.exploration_fraction) * prior + config.exploration_fraction * dirichlet
    trees.prior[:, 0] = prior
    trees.visits[:, 0] = 1
    trees.value_sum[:, 0] = trees.net_value[:, 0] = np.asarray(value, np.float64)
    sign = -1.0 if config.two_player else 1.0
    root_illegal = None if legal is None else ~legal
    root = _GumbelRoot(trees, legal, config, rng, noise) if config.gumbel else None

    for sim in range(config.simulations):
        # Selection: every tree descends in lockstep; one that reaches an action with no node yet
        # stops there, and its later levels are -1 (the backup passes over them).
        node = np.zeros(roots, np.int64)
        chain = [node]
        done = np.zeros(roots, bool)
        leaf_parent, leaf_action = np.zeros(roots, np.int64), np.zeros(roots, np.int64)
        while True:
            if root is not None:
                action = root.select(sim) if len(chain) == 1 else _select_gumbel(trees, rows, node, config, sign)
            else:
                action = _select(trees, rows, node, config, sign, root_illegal if len(chain) == 1 else None)
            child = trees.children[rows, node, action]
            stop = ~done & (child < 0)
            leaf_parent[stop], leaf_action[stop] = node[stop], action[stop]
            done |= stop
            if done.all():
                break
            node = np.where(done, node, child)
            chain.append(np.where(done, -1, node))
        # Expansion: one model step for every tree at once.
        new = sim + 1
        next_hidden, reward, logits, value = model.recurrent(trees.hidden[rows, leaf_parent], leaf_action)
        trees.children[rows, leaf_parent, leaf_action] = new
        trees.hidden[:, new] = next_hidden
        trees.reward[:, new] = reward
        trees.net_value[:, new] = value
        trees.prior[:, new] = _softmax(np.asarray(logits, np.float64))
        chain.append(np.full(roots, new))
        _backup(trees, rows, chain, np.asarray(value, np.float64), config.discount, sign)

    top = np.zeros(roots, np.int64)
    _, visits, q = trees.actions_of(rows, top, config.discount, sign)
    result = SearchResult(visits, trees.value(rows, top), q, prior)
    if root is not None:
        result.improved, result.action = root.result()
    return result


def _considered_visits(m: int, simulations: int) -> np.ndarray:
    """Sequential halving of m root actions as one sequence: at simulation i, the root takes an
    action that has exactly entry i's visits. Each phase gives every action still considered the
    same share of the budget (at least one visit), then halves them (never below 2)."""
    if m <= 1:
        return np.arange(simulations)
    phases = math.ceil(math.log2(m))
    sequence: list[int] = []
    visits, considered = 0, m
    while len(sequence) < simulations:
        for _ in range(max(1, simulations // (phases * considered))):
            sequence += [visits] * considered
            visits += 1
        considered = max(2, considered // 2)
    return np.array(sequence[:simulations])


def _sigma_completed_q(trees: _Trees, rows: np.ndarray, node: np.ndarray, config: SearchConfig,
                       sign: float) -> tuple[np.ndarray, np.ndarray]:
    """(visits, sigma(completed Q)) of each action of each tree's `node`, [B, A] each."""
    _, visits, q = trees.actions_of(rows, node, config.discount, sign)
    visited = visits > 0
    prior = trees.prior[rows, node]
    total = visits.sum(-1)
    visited_prior = (prior * visited).sum(-1)
    mean_q = (prior * visited * q).sum(-1) / np.maximum(visited_prior, 1e-12)
    mixed = (trees.net_value[rows, node] + total * mean_q) / (1 + total)
    completed = np.where(visited, q, mixed[:, None])
    # Rescaled by the smallest and largest Q in the whole tree, as pUCT's are: per node, two
    # actions would always rescale to 0 and 1, however close their values.
    span = (trees.q_max - trees.q_min)[rows, None]
    rescaled = np.where(span > 0, np.clip((completed - trees.q_min[rows, None]) / np.where(span > 0, span, 1.0), 0, 1),
                        0.0)
    return visits, (config.c_visit + visits.max(-1, keepdims=True)) * config.c_scale * rescaled


def _select_gumbel(trees: _Trees, rows: np.ndarray, node: np.ndarray, config: SearchConfig,
                   sign: float) -> np.ndarray:
    """Inside the tree: the action whose visits lag most behind the improved policy's share."""
    visits, sigma = _sigma_completed_q(trees, rows, node, config, sign)
    improved = _softmax(np.log(np.maximum(trees.prior[rows, node], 1e-30)) + sigma)
    return (improved - visits / (1 + visits.sum(-1, keepdims=True))).argmax(-1)


class _GumbelRoot:
    """The root's side of Gumbel MuZero: noise, the considered actions, sequential halving."""

    def __init__(self, trees: _Trees, legal: np.ndarray | None, config: SearchConfig, rng: np.random.Generator,
                 noise: bool) -> None:
        roots, actions = trees.prior.shape[0], trees.prior.shape[2]
        self.trees, self.config, self.rows = trees, config, np.arange(roots)
        self.root = np.zeros(roots, np.int64)  # every tree's node 0
        self.legal = np.ones((roots, actions), bool) if legal is None else legal
        self.logits = np.where(self.legal, np.log(np.maximum(trees.prior[:, 0], 1e-30)), -np.inf)
        self.gumbel = rng.gumbel(size=(roots, actions)) if noise else np.zeros((roots, actions))
        self.sign = -1.0 if config.two_player else 1.0
        considered = np.minimum(config.max_considered, self.legal.sum(-1))
        self.schedule = np.stack([_considered_visits(int(m), config.simulations) for m in considered]) \
            if config.simulations else np.zeros((roots, 0), np.int64)

    def _best(self, visits: np.ndarray, sigma: np.ndarray, eligible: np.ndarray) -> np.ndarray:
        """Per root, the eligible action of largest g + logits + sigma (any legal one if none is)."""
        eligible = np.where(eligible.any(-1, keepdims=True), eligible, self.legal)
        return np.where(eligible, self.gumbel + self.logits + sigma, -np.inf).argmax(-1)

    def select(self, sim: int) -> np.ndarray:
        visits, sigma = _sigma_completed_q(self.trees, self.rows, self.root, self.config, self.sign)
        return self._best(visits, sigma, self.legal & (visits == self.schedule[:, sim, None]))

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """(improved policy, action): the action among the most visited candidates."""
        visits, sigma = _sigma_completed_q(self.trees, self.rows, self.root, self.config, self.sign)
        improved = np.where(self.legal, _softmax(np.where(self.legal, self.logits + sigma, -1e30)), 0.0)
        most = visits == np.where(self.legal, visits, -1).max(-1, keepdims=True)
        return improved, self._best(visits, sigma, self.legal & most)


def _select(trees: _Trees, rows: np.ndarray, node: np.ndarray, config: SearchConfig, sign: float,
            illegal: np.ndarray | None) -> np.ndarray:
    """pUCT's action at each tree's `node`: normalised Q plus the prior's exploration bonus."""
    tried, child_visits, q = trees.actions_of(rows, node, config.discount, sign)
    # An action not tried yet is valued as its parent is (as EfficientZero does), not at the
    # tree's minimum: else the first action tried, whose Q sits at the top of the normalised
    # range, keeps every visit the prior does not take from it.
    q = np.where(tried & (child_visits > 0), q, trees.value(rows, node)[:, None])
    span = trees.q_max - trees.q_min
    normalised = np.where(span[:, None] > 0, (q - trees.q_min[:, None]) / np.where(span > 0, span, 1.0)[:, None], q)
    parent_visits = trees.visits[rows, node].astype(np.float64)
    c = config.pb_c_init + np.log((parent_visits + config.pb_c_base + 1) / config.pb_c_base)
    bonus = trees.prior[rows, node] * (c * np.sqrt(parent_visits))[:, None] / (1 + child_visits)
    score = normalised + bonus
    if illegal is not None:
        score = np.where(illegal, -np.inf, score)
    return score.argmax(-1)


def _backup(trees: _Trees, rows: np.ndarray, chain: list[np.ndarray], value: np.ndarray, discount: float,
            sign: float) -> None:
    """Add the leaf's value to every node on each tree's path (levels of `chain`, -1 where a
    tree's path is shorter), each in the view of the player to move there."""
    g = value
    for node in reversed(chain):
        on = node >= 0
        b, n = rows[on], node[on]
        trees.value_sum[b, n] += g[on]
        trees.visits[b, n] += 1
        q = trees.reward[b, n] + discount * sign * trees.value_sum[b, n] / trees.visits[b, n]
        np.minimum.at(trees.q_min, b, q)
        np.maximum.at(trees.q_max, b, q)
        g = np.where(on, trees.reward[rows, np.maximum(node, 0)] + discount * sign * g, g)


def select_action(visits: np.ndarray, temperature: float, rng: np.random.Generator) -> np.ndarray:
    """Actions [B] drawn with probability visits ** (1 / temperature) (0: the most visited, ties at random)."""
    visits = np.asarray(visits, np.float64)
    if temperature == 0:
        best = visits == visits.max(-1, keepdims=True)
        return (best * rng.random(visits.shape)).argmax(-1)
    weights = visits ** (1.0 / temperature)
    p = weights / weights.sum(-1, keepdims=True)
    return (p.cumsum(-1) > rng.random((len(p), 1))).argmax(-1)
