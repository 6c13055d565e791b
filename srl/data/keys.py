"""Batch keys, declared once. Every module names sample fields through these constants.

A sample batch is time-major: leaves are shaped [T + 1, B, ...], where B counts
(env, agent) rows and the extra last step carries the observation (and its value)
used to bootstrap the return; consecutive trajectories overlap by that one step.

Row t holds the observation o_t, what the policy did with it (action, log-prob, value,
the RNN state it started from, its version) and what the env answered (the reward for
that action and whether the episode ended after it).
"""

OBS = "obs"
ACTION = "action"
LOGPROB = "logprob"
VALUE = "value"
REWARD = "reward"
TERMINATED = "terminated"
TRUNCATED = "truncated"
RNN_STATE = "rnn_state"
#: Policy version that produced the action in this row.
VERSION = "policy_version"
#: 1.0 where the row belongs to a live agent; agents that finished early are masked out.
ALIVE = "alive"
#: True where a row begins a new episode, so an RNN restarts there from its initial state
#: (derived by the algorithm from the done flags of the row before; not sent by actors).
EPISODE_START = "episode_start"
#: An observation field of 0/1 per discrete action: the actions legal now (turn-based games).
#: Policies never choose an action whose entry is 0 (`srl.models.masks`).
ACTION_MASK = "action_mask"
#: What a policy that searches (MuZero) found for the row, the target its learner trains the
#: policy towards [..., actions]: the root's visit distribution, or Gumbel's improved policy.
#: (Its searched value is the row's `VALUE`.)
SEARCH_POLICY = "search_policy"

# Replay batches (built by buffer workers, see `srl.replay`).
#: The observation an n-step return bootstraps from.
NEXT_OBS = "next_obs"
#: Discounted sum of the n rewards after the action (fewer at an episode's or segment's end).
NSTEP_RETURN = "nstep_return"
#: What multiplies the bootstrap value: gamma ** n, or 0 after a terminal step.
DISCOUNT = "discount"
#: Which stored unit a sampled row came from (for the priority update the learner sends back).
REPLAY_INDEX = "replay_index"
#: Importance-sampling weight of a sampled row (prioritized replay; 1 with uniform replay).
REPLAY_WEIGHT = "replay_weight"
#: A learner's new priority for a sampled unit (e.g. its |TD error|), sent back to the buffer.
PRIORITY = "priority"
