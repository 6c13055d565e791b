"""The LSTM option of the actor-critic: training unrolls reproduce acting, and memory is learned."""

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

from srl.data import keys
from srl.data.named_array import NamedArray
from srl.models.actor_critic import ActorCriticPolicy


def test_unrolled_analysis_reproduces_step_by_step_acting():
    torch.manual_seed(0)
    space = gym.spaces.Dict({keys.OBS: gym.spaces.Box(-1, 1, (3,), np.float32)})
    policy = ActorCriticPolicy(space, gym.spaces.Discrete(4), hidden=[16], lstm=8)
    T, B = 6, 5
    rng = np.random.default_rng(0)
    obs = rng.uniform(-1, 1, (T, B, 3)).astype(np.float32)
    starts = np.zeros((T, B), bool)
    starts[3, 1] = starts[2, 4] = True  # two rows begin new episodes mid-trajectory
    state = policy.initial_state(B)
    first = state.copy()
    actions, logprobs, values = [], [], []
    for t in range(T):
        if starts[t].any():  # as the env ring does at a reset
            state[np.flatnonzero(starts[t])] = policy.initial_state(int(starts[t].sum()))
        out = policy.rollout(NamedArray({keys.OBS: obs[t]}), state)
        actions.append(out[keys.ACTION]), logprobs.append(out[keys.LOGPROB]), values.append(out[keys.VALUE])
        assert not np.allclose(out[keys.RNN_STATE]["h"], state["h"])  # the state moves
        state = out[keys.RNN_STATE]
    analysis = policy.analyze({keys.OBS: {keys.OBS: torch.as_tensor(obs)}, keys.ACTION: torch.as_tensor(np.stack(actions)),
                               keys.RNN_STATE: {k: torch.as_tensor(v) for k, v in first.items()},
                               keys.EPISODE_START: torch.as_tensor(starts)})
    np.testing.assert_allclose(analysis.logprob.detach().numpy(), np.stack(logprobs), atol=1e-5)
    np.testing.assert_allclose(analysis.value.detach().numpy(), np.stack(values), atol=1e-5)
    # Without the restarts the unroll differs exactly where an episode began.
    ignored = policy.analyze({keys.OBS: {keys.OBS: torch.as_tensor(obs)}, keys.ACTION: torch.as_tensor(np.stack(actions)),
                              keys.RNN_STATE: {k: torch.as_tensor(v) for k, v in first.items()},
                              keys.EPISODE_START: torch.zeros((T, B), dtype=torch.bool)})
    ignored_logprob = ignored.logprob.detach().numpy()
    assert not np.allclose(ignored_logprob[3, 1], logprobs[3][1], atol=1e-5)
    np.testing.assert_allclose(ignored_logprob[:, 0], np.stack(logprobs)[:, 0], atol=1e-5)


@pytest.mark.integration
def test_lstm_policy_learns_to_recall_through_remote_policy_workers(run_srl, tmp_path):
    # A feed-forward policy cannot average more than 0.5 here (the cue is gone after step 0).
    run_dir = tmp_path / "run"
    result = run_srl("train", "cartpole-ppo", "--run-dir", str(run_dir), "env.type=recall", "env.id=null",
                     "policy.args={hidden: [32], lstm: 32}", "actors.inference=remote", "actors.ring_size=2",
                     "actors.envs_per_slot=16", "actors.trajectory_length=16", "stop.episode_return=0.9",
                     "stop.env_steps=300000", "log.tensorboard=false", timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stop_reason"].startswith("episode_return_mean"), summary
