"""`srl export`: the exported file acts as the policy's own deterministic `rollout` does.

Each run directory is built in-process (a config.yaml and a checkpoint of a perturbed policy
with obs normalisation fed real statistics) and checked on observations recorded from the
real env; the integration test exports a really trained run through the CLI.
"""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from conftest import train_inline

from srl.api.components import make_env, make_policy
from srl.api.config import run_config
from srl.api.config_files import read_config_file
from srl.api.env import spaces_of
from srl.cli import main
from srl.data import keys
from srl.data.named_array import NamedArray
from srl.evaluate import policy_for
from srl.export import SIGNATURE_FILE, export
from srl.learn import checkpoint

ort = pytest.importorskip("onnxruntime")
# Loading TorchScript is what users of the file do, deprecated or not.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")

ROWS = 300


def has_mujoco() -> bool:
    try:
        import mujoco  # noqa: F401
    except ImportError:
        return False
    return True


def gym_config(env_id: str, **policy_args: Any) -> dict[str, Any]:
    return {"name": "export-test", "seed": 1, "env": {"type": "gym", "id": env_id},
            "policy": {"type": "actor_critic", "args": policy_args}, "stop": {"env_steps": 1}}


def record_observations(env_config: dict[str, Any], rows: int = ROWS, seed: int = 0) -> NamedArray:
    """At least `rows` observations (every agent's) of the real env under random actions."""
    env = make_env(env_config)
    action_space = spaces_of(env)[1]
    action_space.seed(seed)
    steps, seen = env.reset(seed=seed), []
    while len(seen) < rows:
        seen.extend(step.obs for step in steps.values())
        if any(step.terminated or step.truncated for step in steps.values()):
            steps = env.reset()
        else:
            steps = env.step({agent: action_space.sample() for agent in steps})
    env.close()
    return NamedArray({k: np.stack([obs[k] for obs in seen[:rows]]) for k in seen[0]})


def make_run(tmp_path, config: dict[str, Any], obs: NamedArray):
    """A run directory whose checkpoint holds a policy unlike a fresh one: weights perturbed,
    normalisation statistics from the recorded observations."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    env = make_env(config["env"])
    policy = make_policy(config["policy"], *spaces_of(env))
    env.close()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.5)
    policy.update_statistics(obs)
    policy.version = 7
    checkpoint.save(run / "checkpoints", policy.version, {"policy": policy.state_dict()}, {"env_steps": 0}, keep=2)
    return run


def reference_actions(run, obs: NamedArray, steps: int = 1) -> np.ndarray:
    """The checkpoint's policy, `rollout(deterministic=True)` on `obs` split into `steps` steps
    of equal batches (its RNN state carried between them); Box actions clipped as the env does."""
    config = run_config(run)
    env = make_env(config.env)
    spaces = spaces_of(env)
    env.close()
    policy, _ = policy_for("latest", run, config, spaces)
    batches = np.split(np.arange(len(obs[next(iter(obs.keys()))])), steps)
    state, actions = policy.initial_state(len(batches[0])), []
    for rows in batches:
        out = policy.rollout(obs[rows], state, deterministic=True)
        actions.append(out[keys.ACTION])
        state = out[keys.RNN_STATE] if keys.RNN_STATE in out else state
    action = np.concatenate(actions)
    if isinstance(spaces[1], gym.spaces.Box):
        action = np.clip(action, spaces[1].low, spaces[1].high)
    return action


def exported_actions(path, fmt: str, obs: NamedArray, state_width: int = 0, steps: int = 1) -> tuple[list, np.ndarray]:
    """The file's input names and its actions on the same observations (float fields as float32,
    as the docs say), its RNN state fed back between steps."""
    if fmt == "onnx":
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        run = lambda *inputs: session.run(None, dict(zip(names, inputs)))  # noqa: E731
    else:
        extra = {SIGNATURE_FILE: ""}
        module = torch.jit.load(str(path), _extra_files=extra)
        names = json.loads(extra[SIGNATURE_FILE])["inputs"]

        def run(*inputs):
            out = module(*map(torch.from_numpy, inputs))
            return [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]
    fields = [np.asarray(obs[k], np.float32) if obs[k].dtype.kind == "f" else obs[k] for k in names if k in obs]
    batches = [[x[rows] for x in fields] for rows in np.split(np.arange(len(fields[0])), steps)]
    state = [np.zeros((len(batches[0][0]), state_width), np.float32)] * 2 if state_width else []
    actions = []
    for batch in batches:
        action, *state = run(*batch, *state)
        actions.append(action)
    return names, np.concatenate(actions)


# HalfCheetah's observations are float64: the file takes them as float32 (within 1e-5 still).
BOX_ENVS = ["Pendulum-v1"] + (["HalfCheetah-v5"] if has_mujoco() else [])


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
@pytest.mark.parametrize("env_id", ["CartPole-v1", *BOX_ENVS])
def test_exported_policy_acts_as_rollout(tmp_path, env_id, fmt):
    config = gym_config(env_id, hidden=[32, 32], obs_norm=True)
    obs = record_observations(config["env"])
    run = make_run(tmp_path, config, obs)
    out = tmp_path / f"policy.{'onnx' if fmt == 'onnx' else 'pt'}"
    done = export(run, out, fmt)
    width = obs[keys.OBS].shape[1]
    assert done.checkpoint == "ckpt-000000007.pt" and done.inputs == {keys.OBS: f"[batch, {width}] float32"}
    expected = reference_actions(run, obs)
    names, got = exported_actions(out, fmt, obs)
    assert names == [keys.OBS]
    if env_id == "CartPole-v1":
        assert got.dtype == np.int64 and set(np.unique(expected)) == {0, 1}  # both actions occur
        np.testing.assert_array_equal(got, expected)
    else:
        space = gym.make(env_id).action_space
        assert got.shape == (ROWS, *space.shape) and got.dtype == np.float32
        at_bounds = (expected == space.low) | (expected == space.high)
        assert at_bounds.any() and not at_bounds.all()  # some clipped, some not
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_lstm_policy_exports_with_its_state_as_inputs_and_outputs(tmp_path, fmt):
    config = gym_config("CartPole-v1", hidden=[16], lstm=8, obs_norm=True)
    obs = record_observations(config["env"])
    run = make_run(tmp_path, config, obs)
    out = tmp_path / f"policy.{fmt}"
    done = export(run, out, fmt)
    assert list(done.outputs) == [keys.ACTION, f"next_{keys.RNN_STATE}/h", f"next_{keys.RNN_STATE}/c"]
    # 30 steps of 10 rows: the state carried through the file must match the policy's own
    names, got = exported_actions(out, fmt, obs, state_width=8, steps=30)
    assert names == [keys.OBS, f"{keys.RNN_STATE}/h", f"{keys.RNN_STATE}/c"]
    np.testing.assert_array_equal(got, reference_actions(run, obs, steps=30))


@pytest.mark.skipif(not has_mujoco(), reason="hide-and-seek needs MuJoCo")
def test_hide_and_seek_exports_named_fields_and_multidiscrete_actions(tmp_path):
    """Many observation fields (bool masks among them), entity attention, MultiDiscrete actions;
    the centralised critic's inputs are not the actor's, so ONNX leaves them out."""
    config = read_config_file("hns-mappo")
    obs = record_observations(config["env"], rows=80)
    run = make_run(tmp_path, config, obs)
    expected = reference_actions(run, obs)
    assert expected.shape == (80, 5) and len(np.unique(expected[:, 0])) > 1
    actor_inputs = sorted(config["policy"]["args"]["actor_inputs"])
    for fmt in ("onnx", "torchscript"):
        done = export(run, tmp_path / f"hns.{fmt}", fmt)
        names, got = exported_actions(done.path, fmt, obs)
        assert sorted(names) == (actor_inputs if fmt == "onnx" else sorted(obs.keys()))
        assert list(done.inputs) == names
        np.testing.assert_array_equal(got, expected)


def test_cli_export_and_its_errors(tmp_path, capsys):
    config = gym_config("CartPole-v1", hidden=[16])
    obs = record_observations(config["env"], rows=50)
    run = make_run(tmp_path, config, obs)
    ckpt = checkpoint.latest(run / "checkpoints")
    assert main(["export", str(run), "-o", str(tmp_path / "p.onnx"), "--checkpoint", str(ckpt)]) == 0
    assert "obs [batch, 4] float32 -> action [batch] int64" in capsys.readouterr().out
    np.testing.assert_array_equal(exported_actions(tmp_path / "p.onnx", "onnx", obs)[1], reference_actions(run, obs))
    assert main(["export", str(run), "-o", str(tmp_path / "p.bin")]) == 2
    assert "cannot tell the format from 'p.bin'" in capsys.readouterr().err
    assert main(["export", str(run), "-o", str(tmp_path / "p.onnx"), "--checkpoint", "random"]) == 2
    assert "RandomPolicy has no acting_module()" in capsys.readouterr().err
    assert main(["export", str(tmp_path), "-o", str(tmp_path / "p.onnx")]) == 2
    assert "not a run directory" in capsys.readouterr().err


@pytest.mark.integration
def test_trained_cartpole_run_exports_through_the_cli(run_srl, tmp_path):
    run = tmp_path / "run"
    train_inline(run, "cartpole-ppo", "stop.env_steps=20000")
    obs = record_observations({"type": "gym", "id": "CartPole-v1"})
    expected = reference_actions(run, obs)
    assert set(np.unique(expected)) == {0, 1}
    for fmt, name in (("onnx", "cartpole.onnx"), ("torchscript", "cartpole.pt")):
        result = run_srl("export", str(run), "--format", fmt, "-o", name)
        assert result.returncode == 0, result.stderr[-3000:]
        np.testing.assert_array_equal(exported_actions(tmp_path / name, fmt, obs)[1], expected)
