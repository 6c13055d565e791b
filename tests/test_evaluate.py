"""`srl evaluate`: a checkpoint plays episodes; agents can act with different sources."""

import json

import pytest
from conftest import train_inline

from srl.evaluate import evaluate

FAKE_RUN = """
name: fake-eval
seed: 3
env: {type: fake, args: {n_agents: 2, n_actions: 3, episode_length: 6}}
policy: {type: actor_critic, args: {hidden: [16]}}
stop: {env_steps: 1000}
"""


@pytest.fixture
def fake_run(tmp_path):
    (tmp_path / "config.yaml").write_text(FAKE_RUN)
    (tmp_path / "checkpoints").mkdir()
    return tmp_path


def test_each_agent_prefix_gets_its_source(fake_run):
    result = evaluate(fake_run, episodes=10, envs=3, agents={"agent_": "initial", "agent_1": "random"})
    assert result.agents == {"agent_0": "initial", "agent_1": "random"}  # the longest prefix wins
    assert result.episodes == 10 and result.length_mean == 6
    assert 0 <= result.return_mean <= 6  # at most one point per step


def test_bad_sources_are_named(fake_run):
    with pytest.raises(ValueError, match="holds no valid checkpoint"):
        evaluate(fake_run, episodes=1, envs=1)  # every agent defaults to `latest`
    with pytest.raises(ValueError, match="'seeker' matches none of the env's agents"):
        evaluate(fake_run, episodes=1, envs=1, agents={"seeker": "initial"})
    with pytest.raises(ValueError, match="does not exist"):
        evaluate(fake_run, episodes=1, envs=1, agents={"agent": str(fake_run / "ckpt-000000001.pt")})


@pytest.mark.integration
def test_trained_cartpole_beats_its_initial_and_a_random_policy(run_srl, tmp_path):
    run_dir = tmp_path / "run"
    train_inline(run_dir, "cartpole-ppo", "stop.episode_return=200")
    result = run_srl("evaluate", str(run_dir), "--episodes", "16", "--agents", "agent=latest",
                     "--json", str(tmp_path / "latest.json"))
    assert result.returncode == 0, result.stderr[-3000:]
    means = {"latest": json.loads((tmp_path / "latest.json").read_text())["return_mean"]}
    for source in ("initial", "random"):
        means[source] = evaluate(run_dir, episodes=16, agents={"agent": source}).return_mean
    assert means["latest"] > 120, means  # stopped at a training mean of 200
    assert means["initial"] < 60 and means["random"] < 60, means
    assert not (tmp_path / "workdir").exists()  # nothing written outside the run directory
    bad = run_srl("evaluate", str(run_dir), "--agents", "agent")
    assert bad.returncode == 2 and "expected PREFIX=SOURCE" in bad.stderr


def _nan_everywhere(state):
    import numpy as np
    import torch

    if isinstance(state, torch.Tensor):
        return torch.full_like(state, float("nan")) if state.is_floating_point() else state
    if isinstance(state, np.ndarray):
        return np.full_like(state, np.nan) if np.issubdtype(state.dtype, np.floating) else state
    if isinstance(state, dict):
        return {k: _nan_everywhere(v) for k, v in state.items()}
    return state


def test_a_checkpoint_of_non_finite_weights_is_refused_unless_asked(fake_run, capsys, monkeypatch):
    from srl import cli
    from srl.api.components import make_env, make_policy
    from srl.api.config import run_config
    from srl.api.env import spaces_of
    from srl.learn import checkpoint

    config = run_config(fake_run)
    policy = make_policy(config.policy, *spaces_of(make_env(config.env)))
    checkpoint.save(fake_run / "checkpoints", 7, {"policy": _nan_everywhere(policy.state_dict())}, {"env_steps": 70},
                    keep=3)
    with pytest.raises(ValueError, match=r"ckpt-000000007.pt holds non-finite weights \(NaN or infinity\): refused"):
        evaluate(fake_run, episodes=2, envs=1)
    played = evaluate(fake_run, episodes=2, envs=1, allow_non_finite=True)  # asked for: it plays
    assert played.episodes == 2 and played.agents == {"agent_0": "ckpt-000000007.pt", "agent_1": "ckpt-000000007.pt"}
    monkeypatch.chdir(fake_run)  # the command works in the run's workdir
    assert cli.main(["evaluate", str(fake_run), "--episodes", "2", "--envs", "1"]) == cli.EXIT_CONFIG
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "non-finite" in err and "--allow-non-finite" in err, err
