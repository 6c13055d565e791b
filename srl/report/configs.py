"""`srl configs`: each bundled config's env, algorithm, the pip extra it needs, and the result
it reached in the docs."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

from srl.api.config_files import bundled_configs, read_config_file

#: Where each bundled config's reference result comes from: one line each, its numbers as the
#: doc gives them (tests/test_report.py checks that they appear there).
REFERENCE_RESULTS: dict[str, tuple[str, str]] = {
    "cartpole-ppo": ("mean return ≥ 475 in 4.92 s of wall time, 194,688 env steps (median of 3 rounds), 2 CPU cores",
                     "docs/benchmarks.md"),
    "cartpole-appo": ("mean return ≥ 475 in 6.08–6.26 s, 160,256–191,808 env steps (seeds 1–3), 2 CPU cores",
                      "docs/benchmarks.md"),
    "pong-ppo": ("game score 0 in 24.9 minutes (445k env steps), 2 CPU cores", "docs/environments.md"),
    "pong-appo": ("game score −20.0 → +18.6 in 300 s (5.50M env steps), one H200 GPU and 16 cores",
                  "docs/benchmarks.md"),
    "halfcheetah-ppo": ("mean return ≥ 1500 after 325k–523k env steps, 14–22 s, 2 CPU cores",
                        "docs/environments.md"),
    "vizdoom-basic-ppo": ("mean return −165 → +46 within 20k env steps (447 s; random policy −130), 2 CPU cores",
                          "docs/environments.md"),
    "spread-mappo": ("random policy −27.5; −22.5 after 11–19k env steps; −19.4 at 150k, 2 CPU cores",
                     "docs/environments.md"),
    "football-3v1-mappo": ("goal rate 1.0% (random team) → 27.8% ± 2.2% after a 26-minute run (1.0M env steps), "
                           "2 CPU cores", "docs/environments.md"),
    "cartpole-dqn": ("mean return ≥ 475 after 118,912–198,144 env steps, 16.9–28.8 s (seeds 1–5), 2 CPU cores",
                     "docs/replay.md"),
    "pong-apex": ("not measured: a run of 20,016 env steps finishes cleanly in 226 s, 2 CPU cores", "docs/replay.md"),
    "recall-r2d2": ("mean return ≥ 0.95 after 6.9k–7.4k env steps, 7.5–9.3 s (seeds 1–4; feed-forward ~0.5), "
                    "2 CPU cores", "docs/replay.md"),
    "spread-qmix": ("random policy −27.5; −22.5 after 19k–21k env steps; −16.9 to −17.9 at 150k (seeds 1–3), 2 CPU cores",
                    "docs/replay.md"),
    "cartpole-ppo-pbt": ("every member's mean return 500.0 at 600,000 env steps each (seeds 1–3); with exploit "
                         "off only the member started at lr 1e-3 reaches 500.0, the others 48.5–496.5, 2 CPU cores",
                         "docs/population.md"),
    "duel-selfplay": ("rating of the newest version against its frozen pool 12.1 → 61.2 and 14.1 → 49.8 "
                      "(seeds 1, 2) in 180 s, 1.11M–1.23M env steps, 2 CPU cores", "docs/selfplay.md"),
    "cartpole-muzero": (("mean return ≥ 475 after 123k, 101k and 100k env steps (seeds 1-3; PPO: ~170k), in 222-397 s "
                         "beside another run, 2 CPU cores"), "docs/muzero.md"),
    "tictactoe-muzero": (("after 300k moves (681-818 s beside another run, seeds 1-3): not one game of 200 a side "
                          "lost to perfect or random play; against random play 92.3-95.0% won, 2 CPU cores"),
                         "docs/muzero.md"),
    "connect4-selfplay": (("after 900 s (3.93M moves), 200 games a side: wins against random play 100.0% first / "
                           "94.5% second, against a depth-2 search player 54.5% / 46.0% (seed 2: 98.0% / 95.0% "
                           "and 33.5% / 25.0%), 2 CPU cores"),
                          "docs/selfplay.md"),
    "speaker-listener-mappo": (("a policy each for speaker and listener: random −38.3; −25 after 10.9k–14.1k env "
                                "steps (seeds 1–3); −14.6 to −17.2 at 100k, 2 CPU cores"), "docs/environments.md"),
    "adversary-mappo": (("two teams, a policy each: against random opponents the good agents score +20.0 (random "
                         "+8.0), the adversary −19.8 (random −27.8), after 200k env steps (86 s), 2 CPU cores"),
                        "docs/environments.md"),
    "hns-mappo-2p": (("seekers and hiders with a policy each: after 15 minutes (140k env steps) trained hiders cut "
                      "untrained seekers from −6.6 to −28.1; trained seekers score +21.9 against them, 2 CPU cores"),
                     "docs/environments.md"),
    "hns-mappo": ("40-minute run (698k env steps); seekers trained against fixed hiders rise from −12 to +18",
                  "docs/environments.md"),
}

#: Gymnasium ids (without version) that MuJoCo simulates.
MUJOCO_IDS = {"Ant", "HalfCheetah", "Hopper", "Humanoid", "HumanoidStandup", "InvertedDoublePendulum",
              "InvertedPendulum", "Pusher", "Reacher", "Swimmer", "Walker2d"}
#: What each extra of pyproject.toml installs, as the modules that show it is there.
EXTRA_MODULES = {"atari": ["ale_py", "cv2"], "mujoco": ["mujoco"], "vizdoom": ["vizdoom"],
                 "pettingzoo": ["pettingzoo"], "hanabi": ["pyspiel", "shimmy"], "envpool": ["envpool"],
                 "football": ["gfootball"]}
#: Extras that pip alone does not install.
EXTRA_NOTES = {"football": "bash scripts/install_football.sh"}


def extras_for(env: dict[str, Any]) -> list[str]:
    """The pyproject extras an env section needs (none for Gymnasium's classic control)."""
    kind, env_id = str(env.get("type") or "gym"), str(env.get("id") or "")
    extras: list[str] = []
    if kind == "gym":
        if env_id.startswith("ALE/"):
            extras.append("atari")
        elif env_id.split("/")[-1].split("-v")[0] in MUJOCO_IDS:
            extras.append("mujoco")
    elif kind == "turn_based":  # PettingZoo's AEC games
        extras.append("pettingzoo")
        if "hanabi" in env_id:
            extras.append("hanabi")
    elif kind in ("atari", "vizdoom", "pettingzoo", "football"):
        extras.append(kind)
        if kind == "pettingzoo" and env_id.startswith("srl.envs.hide_and_seek"):
            extras.insert(0, "mujoco")
    if env.get("backend") == "envpool":
        extras.append("envpool")
    return extras


def _installed(env: dict[str, Any], extras: list[str]) -> bool:
    modules = [m for extra in extras for m in EXTRA_MODULES.get(extra, [])]
    env_id = str(env.get("id") or "")
    if env.get("type") == "pettingzoo" and env_id and not env_id.startswith("srl."):
        modules.append(env_id.split(".")[0].split(":")[0])  # the package of the env (mpe2, ...)
    try:
        return all(importlib.util.find_spec(m) is not None for m in modules)
    except (ImportError, ValueError):
        return False


@dataclass
class ConfigInfo:
    name: str
    env_type: str
    env_id: str | None
    algorithm: str
    extras: list[str]
    install: str
    installed: bool
    reference: str | None
    reference_source: str | None

    @property
    def env(self) -> str:
        return f"{self.env_type} {self.env_id}" if self.env_id else self.env_type

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "env": {"type": self.env_type, "id": self.env_id}, "algorithm": self.algorithm,
                "extras": self.extras, "install": self.install, "installed": self.installed,
                "reference": {"result": self.reference, "source": self.reference_source} if self.reference else None}


def config_info(name: str) -> ConfigInfo:
    data = read_config_file(name)
    env = data.get("env") or {}
    args = env.get("args") or {}
    # Envs without a Gymnasium-style id (VizDoom, Football) name their scenario instead.
    env_id = env.get("id") or args.get("scenario")
    extras = extras_for(env)
    install = " && ".join(([f"pip install -e '.[{','.join(extras)}]'"] if extras else [])
                          + [EXTRA_NOTES[e] for e in extras if e in EXTRA_NOTES]) or "pip install -e ."
    reference, source = REFERENCE_RESULTS.get(name, (None, None))
    # Several policies: each policy's algorithm, by policy name.
    sections = [(f"{p}: ", spec or {}) for p, spec in (data.get("policies") or {}).items()] or [("", data)]
    algorithm = ", ".join(f"{p}{(spec.get('algorithm') or {}).get('type') or 'ppo'!s}" for p, spec in sections)
    return ConfigInfo(name=name, env_type=str(env.get("type") or "gym"), env_id=str(env_id) if env_id else None,
                      algorithm=algorithm, extras=extras,
                      install=install, installed=_installed(env, extras), reference=reference,
                      reference_source=source)


def bundled_config_infos() -> list[ConfigInfo]:
    return [config_info(name) for name in bundled_configs()]
