"""Experiment config: loading, overrides, one-line errors naming the field, and the CLI's exit codes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from srl import cli
from srl.api import config as cfg
from srl.api import config_files
from srl.api.config import ConfigError
from srl.api.registry import POLICIES, RegistryError, import_object


def load(*overrides: str) -> cfg.ExperimentConfig:
    return cfg.load("cartpole-ppo", list(overrides))


def config_error(*overrides: str) -> str:
    with pytest.raises(ConfigError) as info:
        load(*overrides)
    message = str(info.value)
    assert "\n" not in message and message.strip() == message, f"not one line: {message!r}"
    return message


def test_bundled_config_loads():
    assert "cartpole-ppo" in config_files.bundled_configs()
    config = load()
    assert config.name == "cartpole-ppo"
    assert config.env.type == "gym" and config.env.id == "CartPole-v1"
    assert config.algorithm.type == "ppo"
    assert config.algorithm.args["lr"] == 0.001
    assert config.algorithm.args["value_coef"] == 0.5  # defaults of the component's own Config filled in
    assert config.policy.args["hidden"] == [64, 64] and config.policy.args["activation"] == "tanh"
    assert config.actors.count >= 1
    assert config.stop.episode_return == 475
    # dump is loadable again
    import yaml
    again = cfg.validate(yaml.safe_load(cfg.dump(config)))
    assert again == config


def test_bundled_config_by_path(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\nenv: {type: fake}\npolicy: {type: random}\nalgorithm: {type: noop}\n"
                    "stop: {env_steps: 100}\n")
    config = cfg.load(str(path), ["actors.count=3"])
    assert config.name == "mine" and config.actors.count == 3 and config.env.type == "fake"
    with pytest.raises(ConfigError, match="does not exist"):
        cfg.load(str(tmp_path / "missing.yaml"))
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError) as info:
        cfg.load(str(bad))
    assert "\n" not in str(info.value)
    listing = tmp_path / "list.yaml"
    listing.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        cfg.load(str(listing))


def test_overrides_parse_values():
    data = config_files.apply_overrides({}, [
        "a.int=4", "a.float=0.25", "a.neg=-3", "a.true=true", "a.false=false", "a.list=[32, 64]",
        "a.str=Acrobot-v1", "a.null=null", "a.empty=", "a.deep.er.key=x", "a.eq=x=y",
    ])
    assert data == {"a": {"int": 4, "float": 0.25, "neg": -3, "true": True, "false": False, "list": [32, 64],
                          "str": "Acrobot-v1", "null": None, "empty": None, "deep": {"er": {"key": "x"}},
                          "eq": "x=y"}}
    assert isinstance(data["a"]["int"], int) and isinstance(data["a"]["true"], bool)


def test_overrides_reach_the_config():
    config = load("actors.count=5", "algorithm.args.lr=1e-3", "policy.args.hidden=[32, 32]",
                  "log.tensorboard=false", "streams.transport=zmq", "env.id=Acrobot-v1", "stop.time_s=2.5")
    assert config.actors.count == 5
    assert config.algorithm.args["lr"] == pytest.approx(1e-3)
    assert config.policy.args["hidden"] == [32, 32]
    assert config.log.tensorboard is False
    assert config.streams.transport == "zmq"
    assert config.env.id == "Acrobot-v1"
    assert config.stop.time_s == 2.5


@pytest.mark.parametrize("override", ["noequals", "=3", ""])
def test_malformed_override(override):
    with pytest.raises(ConfigError, match="key.sub=value"):
        load(override)


def test_override_into_a_value_is_an_error():
    message = config_error("actors.count.x=1")
    assert "count" in message


@pytest.mark.parametrize("override,path", [
    ("bogus=1", "bogus"),
    ("actors.rign_size=2", "actors.rign_size"),
    ("streams.bogus=1", "streams.bogus"),
    ("algorithm.args.lrr=0.1", "algorithm.args.lrr"),
    ("policy.args.hiden=[3]", "policy.args.hiden"),
    ("actors.count=abc", "actors.count"),
    ("actors.count=0", "actors.count"),
    ("actors.count=-2", "actors.count"),
    ("actors.count=[1]", "actors.count"),
    ("actors.inference=sometimes", "actors.inference"),
    ("streams.transport=carrier-pigeon", "streams.transport"),
    ("algorithm.args.gamma=1.5", "algorithm.args.gamma"),
    ("algorithm.args.lr=fast", "algorithm.args.lr"),
    ("trainers.count=3", "trainers.count"),
    ("policy.args.activation=sigmoid", "policy.args.activation"),
    ("env.id=", "env.id"),
    ("policy.type=nosuch", "policy.type"),
    ("algorithm.type=no.such.module:Thing", "algorithm.type"),
    ("policy.type=srl.models.random:NoSuchPolicy", "policy.type"),
    ("actors=3", "actors"),
    # true is not a count of one, nor false a seed of zero
    ("actors.count=true", "actors.count"),
    ("seed=false", "seed"),
    ("stop.time_s=true", "stop.time_s"),
    ("algorithm.args.epochs=true", "algorithm.args.epochs"),
    # the name is a directory under runs/
    ("name=../../etc", "name"),
    ("name=a/b", "name"),
    ("name=..", "name"),
    ("name=.hidden", "name"),
])
def test_bad_values_fail_with_one_line_naming_the_field(override, path):
    message = config_error(override)
    assert message.startswith(f"{path}:") or message.startswith(f"override {override!r}: "), message


@pytest.mark.parametrize("overrides,message", [
    (["actors.count=100000"], "actors.count: 100000 is over limits.workers"),
    (["workers.actor.count=100000"], "workers.actor.count: 100000 is over limits.workers"),
    (["actors.placement.threads=100000"], "actors.placement.threads: 100000 is over limits.threads_per_worker"),
    (["actors.envs_per_slot=100000000"], "actors.envs_per_slot: 100000000 x actors.ring_size"),
    (["replay.capacity=1000000000000"], "replay.capacity: 1000000000000 is over limits.replay_capacity"),
    (["policy.args.hidden=[100000,100000]"], "policy.args.hidden.0: Input should be less than or equal to 16384"),
    (["streams.max_message_mb.samples=100000000000"], "streams.max_message_mb.samples: 1e+11 MiB is over 0.5 of this "
                                                      "machine's memory"),
    (["streams.max_message_mb.samples=1e11"], "streams.max_message_mb.samples: 1e+11 MiB is over"),
    (["streams.max_pending_connections=1000000"], "streams.max_pending_connections: Input should be less than"),
])
def test_resource_bombs_are_refused_in_one_line_naming_the_field(overrides, message):
    """Through the pipeline `srl train` starts a run with (`srl.prepare`), not just `load`."""
    from srl.prepare import prepare

    assert config_error(*overrides).startswith(message)
    with pytest.raises(ConfigError) as info:
        prepare("cartpole-ppo", overrides)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_limits_are_raised_on_purpose_and_the_whole_graph_counts():
    from srl.prepare import resolve_graph

    assert load("actors.count=5000", "limits.workers=6000").actors.count == 5000
    # four members of three workers each (two actors, a trainer) and the population's own worker
    config = cfg.load("cartpole-ppo-pbt", ["limits.workers=8"])
    with pytest.raises(ConfigError, match=r"^limits.workers: the graph has 13 worker processes \(.*\), over 8"):
        resolve_graph(config)


def test_numbers_and_names_that_are_fine_pass():
    config = load("name=cartpole-ppo_v2.1", "log.tensorboard=false", "stop.time_s=30", "actors.count=2")
    assert (config.name, config.log.tensorboard, config.stop.time_s, config.actors.count) == (
        "cartpole-ppo_v2.1", False, 30, 2)


@pytest.mark.parametrize("content,message", [
    (b"name: a\nenv: {type: gym, id: CartPole-v1}\nstop:\n  env_steps: 10\n  env_steps: 20\n",
     "not valid YAML: line 5: the key 'env_steps' is given twice"),
    (b"name: \xff\xfe\n", r"not UTF-8 text \(byte 6\)"),
    (b"name: a\nstop: {env_steps: [1\n", "not valid YAML: line 3:"),
    (b"- name\n", "the top level must be a mapping"),
])
def test_a_config_file_that_cannot_be_read_as_one_is_one_line(tmp_path, content, message):
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=message) as info:
        config_files.read_config_file(str(path))
    assert "\n" not in str(info.value)
    (tmp_path / "folder.yaml").mkdir()
    with pytest.raises(ConfigError, match="folder.yaml is not a file"):
        config_files.read_config_file(str(tmp_path / "folder.yaml"))


def test_unset_stop_condition():
    message = config_error("stop.episode_return=null", "stop.env_steps=null")
    assert "stop" in message


def test_import_path_resolves_a_user_class():
    from srl.models.random import RandomPolicy

    config = load("policy.type=srl.models.random:RandomPolicy", "policy.args={}")
    assert POLICIES.resolve(config.policy.type) is RandomPolicy
    assert import_object("srl.data.named_array:NamedArray.copy").__name__ == "copy"  # dotted attribute
    with pytest.raises(RegistryError, match="unknown policy"):
        POLICIES.resolve("nosuch")
    with pytest.raises(RegistryError, match="cannot import"):
        POLICIES.resolve("srl.no_such_module:X")
    with pytest.raises(RegistryError, match="no attribute"):
        POLICIES.resolve("srl.models.random:Nope")
    assert POLICIES.resolve("random") is RandomPolicy


# ---------------------------------------------------------------------------------- CLI
def run_cli(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "srl.cli", *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)


def test_cli_unknown_key_exits_2_with_one_line(tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(tmp_path, "train", "cartpole-ppo", "actors.rign_size=2", "--run-dir", str(run_dir))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "actors.rign_size" in lines[0]
    assert result.stdout == ""
    assert not run_dir.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no runs/ either


def test_cli_unknown_config_exits_2(tmp_path):
    result = run_cli(tmp_path, "train", "no-such-config", "--run-dir", str(tmp_path / "run"))
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1 and "no-such-config" in result.stderr
    assert not (tmp_path / "run").exists()


def test_cli_in_process_errors(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    for argv, needle in [
        (["train", "cartpole-ppo", "actors.count=abc", "--run-dir", str(run_dir)], "actors.count"),
        (["train", "cartpole-ppo", "--run-dir", str(run_dir), "algorithm.args.lrr=1"], "algorithm.args.lrr"),
        (["train", "actors.count=2"], "CONFIG"),  # overrides but no config
        (["train", str(tmp_path / "missing.yaml")], "missing.yaml"),
    ]:
        assert cli.main(argv) == cli.EXIT_CONFIG
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and needle in err, err
    assert not run_dir.exists() and not (tmp_path / "runs").exists()
    # an unknown flag is an argparse usage error (also exit status 2)
    with pytest.raises(SystemExit) as info:
        cli.main(["train", "cartpole-ppo", "--bogus"])
    assert info.value.code == 2
    capsys.readouterr()


def test_cli_configs_lists_bundled(capsys):
    assert cli.main(["configs"]) == 0
    assert "cartpole-ppo" in capsys.readouterr().out.split()


def test_worker_counts_that_cannot_be_placed_are_one_line_errors():
    with pytest.raises(cfg.ConfigError) as error:
        load("actors.inference=remote", "actors.count=1", "policy_workers.count=2")
    assert "policy_workers.count" in str(error.value) and "\n" not in str(error.value)


def test_elastic_actors_need_the_ray_launcher_and_a_count_within_their_bounds():
    with pytest.raises(cfg.ConfigError, match="ray.elastic: .*set launcher: ray"):
        load("ray.elastic={min_actors: 1, max_actors: 4}")
    with pytest.raises(cfg.ConfigError, match=r"actors.count: 6 is outside ray.elastic's \[1, 4\]"):
        load("launcher=ray", "ray.elastic={min_actors: 1, max_actors: 4}", "actors.count=6")
    with pytest.raises(cfg.ConfigError, match=r"min_actors \(5\) is above max_actors \(4\)"):
        load("launcher=ray", "ray.elastic={min_actors: 5, max_actors: 4}")
    assert load("launcher=ray", "ray.elastic={min_actors: 1, max_actors: 4}").ray.elastic.max_actors == 4


def test_a_missing_gpu_is_an_error_before_launch():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(cfg.ConfigError, match="trainers.device"):
        cfg.check_devices(load("trainers.device=cuda"))
