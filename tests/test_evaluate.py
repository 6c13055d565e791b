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
