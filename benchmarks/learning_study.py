"""Learning study: this package's agents against skrl 2.1.1's own, at equal config, over seeds (resumable).

Every run trains one variant ("algo") on one task for one seed with skrl's ``SequentialTrainer`` and appends one row
to a CSV file: the mean episode return per agent over the first and the last 10% of finished episodes (as
``skrl-marl train`` prints them), the wall time, and a binned learning curve (mean episode return per agent against
env frames) so that tables and plots can be redrawn without training again. A run whose (task, algo, seed, frames,
config hash) is already in the CSV is skipped, so an interrupted study goes on where it stopped. Each run is a fresh
process (``spawn``), so global RNGs and thread settings do not leak between runs; ``--jobs 2`` runs two at a time.

Variants (:data:`VARIANTS`), all with the same models (policy and value MLPs 2x128 tanh from
:mod:`skrl_marl_ext.models`; a Gaussian policy with initial log std 0 for Box actions, a categorical one for
Discrete actions), the same initial weights for a seed, and the agent config of ``skrl-marl train``
(``skrl_marl_ext/configs/mappo.yaml`` / ``ippo.yaml``, agent section: rollouts 100, 4 epochs x 4 mini-batches, lr
5e-4, ``RunningStandardScaler`` for observations and states, grad norm clip 1.0, no value clip, value loss scale 1.0,
``time_limit_bootstrap`` off, skrl's default; the ``-tlb`` variants turn it on):

- ``skrl-mappo``, ``skrl-ippo``: skrl's ``skrl.multi_agents.torch.mappo.MAPPO`` / ``ippo.IPPO``;
- ``mappo``, ``ippo``: ``skrl_marl_ext.MAPPO`` / ``IPPO``;
- ``mappo-paper``: ours with the MAPPO paper's value options on top (``ValueNorm``, Huber delta 10, value clip 0.2);
- ``maddpg``: ``skrl_marl_ext.MADDPG`` with ``skrl_marl_ext/configs/maddpg.yaml`` through our ``Runner``
  (its own models: deterministic 2x128 relu policy, twin Q critics; not comparable in config with the PPO variants);
  ``maddpg-noise009``: with the exploration noise ending at std 0.09 (the earlier default);
  ``maddpg-1critic``: that and one critic (the defaults before the twin critics became one).

Tasks: ``vmas:balance`` (default), ``vmas:navigation``, ``vmas:transport``, ``pettingzoo:mpe2.simple_spread_v3``
(any ``skrl_marl_ext.envs.make_env`` spec works), each behind ``EpisodeRecorder``.

The study (10 seeds x 5 variants on balance, 128 envs x 4000 steps = 512k frames per run; two runs at a time on a
2-core machine), then the tables and plots (``docs/images/learning_<task>.png``)::

    python benchmarks/learning_study.py --tasks vmas:balance --algos skrl-mappo,mappo,skrl-ippo,ippo,mappo-paper \\
        --seeds 0-9 --jobs 2
    python benchmarks/learning_study.py --report

The multi-task study at 1M frames per run (our MAPPO, IPPO and MADDPG beside skrl's MAPPO and IPPO; each
command its own process, run side by side on the 2 cores)::

    python benchmarks/learning_study.py --tasks vmas:balance,vmas:navigation,vmas:transport \
        --algos skrl-mappo,skrl-ippo --seeds 0-2 --frames 1000000
    python benchmarks/learning_study.py --tasks vmas:balance,vmas:navigation,vmas:transport \
        --algos mappo,ippo --seeds 0-2 --frames 1000000
    python benchmarks/learning_study.py --tasks vmas:balance,vmas:navigation --algos maddpg --seeds 0-2 \
        --frames 1000000
    python benchmarks/learning_study.py --report

Re-running the first command trains only what is missing. ``--tag`` marks rows (e.g. the code version they were
taken with) and is part of the config hash, so ``--tag after-fix`` trains the same runs again next to the old ones.
A tiny end-to-end check::

    python benchmarks/learning_study.py --num-envs 8 --timesteps 200 --seeds 0 --csv /tmp/ls_test.csv \\
        --algos skrl-mappo,mappo,skrl-ippo,ippo,mappo-paper
    python benchmarks/learning_study.py --report --csv /tmp/ls_test.csv --images-dir /tmp/ls_images
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import hashlib
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_CSV = os.path.join(HERE, "results", "learning_study.csv")
DEFAULT_IMAGES = os.path.join(REPO, "docs", "images")
TASKS = ("vmas:balance", "vmas:navigation", "vmas:transport", "pettingzoo:mpe2.simple_spread_v3")
REFERENCE = "skrl-mappo"
"""The variant whose mean final return the report's "frames to reach" column aims at."""

MODEL = {"hidden_sizes": [128, 128], "activation": "tanh", "initial_log_std": 0.0}
"""Policy and value MLPs of every PPO variant (``skrl-marl train``'s defaults: configs/mappo.yaml, models)."""

COLUMNS = (
    "task",
    "algo",
    "seed",
    "frames",
    "num_envs",
    "timesteps",
    "config_hash",
    "tag",
    "final_return",
    "first_return",
    "episodes",
    "wall_seconds",
    "setup_seconds",
    "threads",
    "code",
    "versions",
    "date",
    "curve",
)
"""CSV columns. ``curve`` is JSON: ``{"frames": [...], "returns": [...]}`` (bin ends; null for a bin without a
finished episode). ``wall_seconds`` is the training loop only, ``setup_seconds`` env and agent construction."""


# ---------------------------------------------------------------------------------------------------- variants


@dataclasses.dataclass(frozen=True)
class Variant:
    """One "algo" of the study: how to build its agent, and what its config hash covers."""

    builder: str
    """Key of :data:`BUILDERS`."""
    algo: str
    """``mappo``, ``ippo``, ``happo`` or ``maddpg``: the default config of ``skrl-marl train`` it starts from."""
    impl: str = "ours"
    """``ours`` (skrl_marl_ext) or ``skrl`` (skrl's built-in agent)."""
    overrides: tuple[tuple[str, Any], ...] = ()
    """Agent config fields set on top of the default config (preprocessors by name, see :data:`PREPROCESSORS`)."""
    note: str = ""


TWIN_CRITIC = {"class": "QMLP", "hidden_sizes": [128, 128], "activation": "relu"}
"""The second critic of the twin-critic variants: the default config's critic."""

REMOVE = "<remove>"
"""An override value that deletes the field from the config (``("models.critic_2", REMOVE)``: one critic)."""

NOISE_009 = (("exploration_final_scale", 0.3),)
"""The exploration noise ending at std 0.09, as configs/maddpg.yaml had it before the MADDPG defaults study (now 0.03)."""

ONE_CRITIC = (("models.critic_2", REMOVE), *NOISE_009)
"""Overrides of the single-critic MADDPG variants (configs/maddpg.yaml has had twin critics since the MADDPG defaults study)."""

VARIANTS: dict[str, Variant] = {
    "skrl-mappo": Variant("on_policy", "mappo", impl="skrl", note="skrl's MAPPO, critic reads states"),
    "mappo": Variant("on_policy", "mappo", note="skrl_marl_ext.MAPPO"),
    "happo": Variant("on_policy", "happo", note="skrl_marl_ext.HAPPO, a random order each update"),
    "mappo-paper": Variant(
        "on_policy",
        "mappo",
        overrides=(("value_preprocessor", "ValueNorm"), ("huber_delta", 10.0), ("value_clip", 0.2)),
        note="ours + ValueNorm, Huber 10, value clip 0.2",
    ),
    "skrl-ippo": Variant("on_policy", "ippo", impl="skrl", note="skrl's IPPO, critic reads observations"),
    # the time-limit bootstrap, on: ours from V(final observation), skrl's from V(next episode's first observation)
    "mappo-tlb": Variant(
        "on_policy", "mappo", overrides=(("time_limit_bootstrap", True),), note="ours, time-outs bootstrapped"
    ),
    "skrl-mappo-tlb": Variant(
        "on_policy",
        "mappo",
        impl="skrl",
        overrides=(("time_limit_bootstrap", True),),
        note="skrl, time-outs bootstrapped",
    ),
    "ippo": Variant("on_policy", "ippo", note="skrl_marl_ext.IPPO"),
    # the value options three ways, time-outs bootstrapped: skrl's form (a running scaler on values, the clip) against
    # the MAPPO paper's (ValueNorm, the clip, Huber 10); "mappo-tlb" is the same without value options
    "mappo-rss-clip-tlb": Variant(
        "on_policy",
        "mappo",
        overrides=(
            ("value_preprocessor", "RunningStandardScaler"),
            ("value_clip", 0.2),
            ("time_limit_bootstrap", True),
        ),
        note="ours + RunningStandardScaler on values, value clip 0.2, time-outs bootstrapped",
    ),
    "mappo-paper-tlb": Variant(
        "on_policy",
        "mappo",
        overrides=(
            ("value_preprocessor", "ValueNorm"),
            ("huber_delta", 10.0),
            ("value_clip", 0.2),
            ("time_limit_bootstrap", True),
        ),
        note="ours + ValueNorm, Huber 10, value clip 0.2, time-outs bootstrapped",
    ),
    # skrl's mini-batches (mini_batch_order="sequential": each epoch the rollout's steps in order, in the same blocks);
    # first run as diagnostics of the gaps to skrl (MPE simple_spread MAPPO, navigation IPPO)
    "mappo-sequential": Variant(
        "on_policy", "mappo", overrides=(("mini_batch_order", "sequential"),), note="ours, skrl's mini-batch order"
    ),
    "ippo-sequential": Variant(
        "on_policy", "ippo", overrides=(("mini_batch_order", "sequential"),), note="ours, skrl's mini-batch order"
    ),
    # Off-policy variants: built by the "runner" builder from skrl_marl_ext/configs/<algo>.yaml (their own models).
    # Add MADDPG variants here, e.g. "maddpg-noise01": Variant("runner", "maddpg", overrides=(...,)), or give them
    # a builder of their own in BUILDERS.
    "maddpg": Variant(
        "runner",
        "maddpg",
        note="skrl_marl_ext.MADDPG, configs/maddpg.yaml (relu models, twin critics, replay, noise std 0.3 -> 0.03)",
    ),
    # the twin critics with the noise ending at std 0.09 (rows first run as "maddpg-twin", then as "maddpg"); the
    # defaults before the twin critics (its rows were run as "maddpg" then); the config hashes are the same
    "maddpg-noise009": Variant("runner", "maddpg", overrides=NOISE_009, note="MADDPG, noise std 0.3 -> 0.09"),
    "maddpg-1critic": Variant("runner", "maddpg", overrides=ONE_CRITIC, note="MADDPG, one critic per agent"),
    # probes of the navigation collapse with one critic: BenchMARL's replay of 1M frames (7813 rows x 128
    # envs), with half the learning rates, with the paper code's pre-tanh penalty, with TD3's target smoothing
    "maddpg-replay1m": Variant(
        "runner",
        "maddpg",
        overrides=(*ONE_CRITIC, ("memory.memory_size", 7813)),
        note="MADDPG, one critic, replay of 1M transitions",
    ),
    "maddpg-replay1m-preg": Variant(
        "runner",
        "maddpg",
        overrides=(*ONE_CRITIC, ("memory.memory_size", 7813), ("policy_regularization", 1e-3)),
        note="MADDPG, one critic, replay of 1M transitions, the paper code's pre-tanh penalty 1e-3",
    ),
    "maddpg-replay1m-smooth": Variant(
        "runner",
        "maddpg",
        overrides=(
            *ONE_CRITIC,
            ("memory.memory_size", 7813),
            ("smooth_regularization_noise", "GaussianNoise"),
            ("smooth_regularization_noise_kwargs", {"mean": 0.0, "std": 0.2}),
            ("smooth_regularization_clip", 0.5),
        ),
        note="MADDPG, one critic, replay of 1M transitions, TD3's target policy smoothing (std 0.2, clip 0.5)",
    ),
    # the whole of TD3 (MATD3: the default twin critics, target policy smoothing std 0.2 clip 0.5, actor and targets
    # every 2nd gradient step), on the default replay, with the noise ending at std 0.09
    "maddpg-td3": Variant(
        "runner",
        "maddpg",
        overrides=(
            *NOISE_009,
            ("models.critic_2", TWIN_CRITIC),
            ("smooth_regularization_noise", "GaussianNoise"),
            ("smooth_regularization_noise_kwargs", {"mean": 0.0, "std": 0.2}),
            ("smooth_regularization_clip", 0.5),
            ("policy_delay", 2),
        ),
        note="MADDPG as MATD3: twin critics, target smoothing (std 0.2, clip 0.5), policy delay 2",
    ),
    "maddpg-replay1m-lr": Variant(
        "runner",
        "maddpg",
        overrides=(
            *ONE_CRITIC,
            ("memory.memory_size", 7813),
            ("actor_learning_rate", 2.5e-4),
            ("critic_learning_rate", 5e-4),
        ),
        note="MADDPG, one critic, replay of 1M transitions, half the learning rates",
    ),
}
"""The study's variants by name (the report lists them in this order)."""
DEFAULT_ALGOS = ("skrl-mappo", "mappo", "skrl-ippo", "ippo", "mappo-paper")


def default_config(algo: str) -> dict[str, Any]:
    """``skrl_marl_ext/configs/<algo>.yaml`` (read from the installed package without importing it, i.e. torch)."""
    import yaml

    spec = importlib.util.find_spec("skrl_marl_ext")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("learning_study: skrl_marl_ext is not installed (pip install -e . in the repository)")
    with open(os.path.join(list(spec.submodule_search_locations)[0], "configs", f"{algo}.yaml")) as file:
        return yaml.safe_load(file)


def agent_config(variant: Variant) -> dict[str, Any]:
    """The variant's agent config, symbolic (class names as strings): the YAML's agent section plus overrides."""
    cfg = dict(default_config(variant.algo)["agent"])
    cfg.pop("class", None)
    cfg.pop("experiment", None)
    cfg.update(dict(variant.overrides))
    return cfg


def runner_config(variant: Variant) -> dict[str, Any]:
    """A runner variant's whole config: ``configs/<algo>.yaml`` with the overrides, which name agent fields
    (``"batch_size"``) or, as ``"<section>.<key>"``, a field of another section (``"memory.memory_size"``)."""
    config = {
        key: dict(value) if isinstance(value, dict) else value for key, value in default_config(variant.algo).items()
    }
    for key, value in variant.overrides:
        section, _, field = key.rpartition(".")
        if value == REMOVE:
            config[section or "agent"].pop(field, None)
        else:
            config[section or "agent"][field] = value
    return config


def run_description(variant: Variant, *, task: str, num_envs: int, timesteps: int, tag: str) -> dict[str, Any]:
    """Everything that defines a run apart from its seed (what the config hash covers)."""
    if variant.builder == "runner":
        config = runner_config(variant)
    else:
        config = {"agent": agent_config(variant), "models": MODEL}
    return {
        "builder": variant.builder,
        "algo": variant.algo,
        "impl": variant.impl,
        "config": config,
        "task": task,
        "num_envs": num_envs,
        "timesteps": timesteps,
        "tag": tag,
    }


def config_hash(description: dict[str, Any]) -> str:
    text = json.dumps(description, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:10]


# ---------------------------------------------------------------------------------------------------- one run
# Everything below up to the CLI runs in the worker process (imports torch, skrl, the envs).

PREPROCESSORS = ("RunningStandardScaler", "ValueNorm")


def _preprocessor(name: str | None):
    if not name:
        return None
    if name == "RunningStandardScaler":
        from skrl.resources.preprocessors.torch import RunningStandardScaler

        return RunningStandardScaler
    if name == "ValueNorm":
        from skrl_marl_ext import ValueNorm

        return ValueNorm
    raise ValueError(f"unknown preprocessor '{name}'; known: {', '.join(PREPROCESSORS)}")


def make_models(env, *, critic_input: str, device) -> dict[str, dict[str, Any]]:
    """Per agent a policy (Gaussian for Box, categorical for Discrete actions) and a value MLP, sized by :data:`MODEL`.

    Built in ``possible_agents`` order, policy before value, so a seeded torch RNG gives every variant the same
    initial weights.
    """
    import gymnasium

    from skrl_marl_ext.models import CategoricalMLP, GaussianMLP, ValueMLP

    sizes = {"hidden_sizes": tuple(MODEL["hidden_sizes"]), "activation": MODEL["activation"], "device": device}
    models = {}
    for uid in env.possible_agents:
        spaces = {
            "observation_space": env.observation_spaces[uid],
            "state_space": env.state_spaces.get(uid),
            "action_space": env.action_spaces[uid],
        }
        if isinstance(spaces["action_space"], gymnasium.spaces.Discrete):
            policy = CategoricalMLP(**spaces, **sizes)
        else:
            policy = GaussianMLP(**spaces, **sizes, initial_log_std=MODEL["initial_log_std"])
        value = ValueMLP(**spaces, **sizes, input=critic_input)
        models[uid] = {"policy": policy, "value": value}
    return models


def build_on_policy(env, *, variant: Variant, seed: int, timesteps: int, directory: str):
    """MAPPO/IPPO, skrl's or ours, on ``env``: returns the trainer (skrl's ``SequentialTrainer``)."""
    import torch
    from skrl.memories.torch import RandomMemory
    from skrl.trainers.torch import SequentialTrainer
    from skrl.utils import set_seed

    set_seed(seed)  # after the env, as skrl's (and our) Runner does for `skrl-marl train`
    torch.manual_seed(seed)
    device = env.device
    uids = env.possible_agents
    critic_input = "states" if variant.algo in ("mappo", "happo") else "observations"
    models = make_models(env, critic_input=critic_input, device=device)

    cfg = agent_config(variant)
    spaces = {"observation": env.observation_spaces, "state": env.state_spaces}
    for kind in ("observation", "state", "value"):
        cls = _preprocessor(cfg.get(f"{kind}_preprocessor"))
        cfg[f"{kind}_preprocessor"] = cls
        # skrl fills neither size nor device; per-agent dicts also avoid skrl 2.1.1's expand() rejecting `{}`
        cfg[f"{kind}_preprocessor_kwargs"] = {
            uid: ({"size": spaces[kind][uid] if kind != "value" else 1, "device": device} if cls else {})
            for uid in uids
        }
    cfg["learning_rate_scheduler_kwargs"] = {uid: {} for uid in uids}
    experiment = {"directory": directory, "experiment_name": "run", "write_interval": 0, "checkpoint_interval": 0}
    common = {
        "possible_agents": uids,
        "models": models,
        "observation_spaces": env.observation_spaces,
        "state_spaces": env.state_spaces,
        "action_spaces": env.action_spaces,
        "device": device,
    }
    if variant.impl == "skrl":
        from skrl.multi_agents.torch import ExperimentCfg

        if variant.algo == "mappo":
            from skrl.multi_agents.torch.mappo import MAPPO as cls
            from skrl.multi_agents.torch.mappo import MAPPO_CFG as cfg_cls
        else:
            from skrl.multi_agents.torch.ippo import IPPO as cls
            from skrl.multi_agents.torch.ippo import IPPO_CFG as cfg_cls
        known = {f.name for f in dataclasses.fields(cfg_cls)}
        unknown = sorted(set(cfg) - known)
        if unknown:
            raise ValueError(f"{variant.algo}: keys {unknown} are not fields of skrl's {cfg_cls.__name__}")
        memories = {
            uid: RandomMemory(memory_size=cfg["rollouts"], num_envs=env.num_envs, device=device) for uid in uids
        }
        agent = cls(cfg=cfg_cls(**cfg, experiment=ExperimentCfg(**experiment)), memories=memories, **common)
    else:
        from skrl_marl_ext import HAPPO, IPPO, MAPPO

        cls = {"mappo": MAPPO, "ippo": IPPO, "happo": HAPPO}[variant.algo]
        agent = cls(cfg={**cfg, "experiment": experiment}, **common)
    trainer_cfg = {"timesteps": timesteps, "headless": True, "disable_progressbar": True}
    return SequentialTrainer(env=env, agents=agent, cfg=trainer_cfg)


def build_runner(env, *, variant: Variant, seed: int, timesteps: int, directory: str):
    """An agent of ours from ``skrl_marl_ext/configs/<algo>.yaml`` through our Runner (MADDPG): returns the trainer."""
    from skrl_marl_ext.runner import Runner

    cfg = runner_config(variant)
    cfg["seed"] = seed  # the Runner calls skrl's set_seed(seed) after the env exists, as for the on-policy variants
    cfg["agent"]["experiment"] = {
        "directory": directory,
        "experiment_name": "run",
        "write_interval": 0,
        "checkpoint_interval": 0,
    }
    cfg["trainer"] = {**cfg.get("trainer", {}), "timesteps": timesteps, "headless": True, "disable_progressbar": True}
    return Runner(env, cfg).trainer


BUILDERS: dict[str, Callable[..., Any]] = {
    "on_policy": build_on_policy,
    "runner": build_runner,
}
"""``builder(env, *, variant, seed, timesteps, directory) -> trainer`` (anything with ``train()``)."""


def mean_return(episodes: list[tuple[int, dict[str, float]]]) -> float:
    """Mean over episodes of the mean over agents of the episode return (nan without episodes), as the CLI's."""
    if not episodes:
        return float("nan")
    return sum(sum(r.values()) / len(r) for _, r in episodes) / len(episodes)


def binned_curve(
    episodes: list[tuple[int, dict[str, float]]], *, timesteps: int, num_envs: int, bins: int
) -> dict[str, list]:
    """Mean episode return per agent in ``bins`` equal windows of ``[0, timesteps]`` steps, x at the window ends.

    Windows span the whole run (not the last finished episode), so runs of one budget share their x values.
    """
    sums, counts = [0.0] * bins, [0] * bins
    for step, returns in episodes:
        b = min(bins - 1, max(0, math.ceil(step * bins / timesteps) - 1))
        sums[b] += sum(returns.values()) / len(returns)
        counts[b] += 1
    return {
        "frames": [round((b + 1) * timesteps * num_envs / bins) for b in range(bins)],
        "returns": [float(f"{s / c:.6g}") if c else None for s, c in zip(sums, counts, strict=True)],
    }


def run_one(job: dict[str, Any]) -> dict[str, Any]:
    """Train one (task, algo, seed); return its CSV row. Runs in a process of its own."""
    import logging
    import tempfile

    import torch

    if job["threads"] > 0:
        torch.set_num_threads(job["threads"])
    import skrl

    skrl.logger.setLevel(logging.WARNING)
    from skrl_marl_ext.envs import EpisodeRecorder, make_env

    variant = VARIANTS[job["algo"]]
    start = time.perf_counter()
    env = EpisodeRecorder(make_env(job["task"], num_envs=job["num_envs"], device=job["device"], seed=job["seed"]))
    with tempfile.TemporaryDirectory(prefix="learning_study_") as directory:
        trainer = BUILDERS[variant.builder](
            env, variant=variant, seed=job["seed"], timesteps=job["timesteps"], directory=directory
        )
        setup = time.perf_counter() - start
        start = time.perf_counter()
        trainer.train()
        wall = time.perf_counter() - start
        leftovers = [name for name in os.listdir(directory) if name != "run"] + (
            os.listdir(os.path.join(directory, "run")) if os.path.isdir(os.path.join(directory, "run")) else []
        )
    episodes = env.episodes
    tenth = max(1, len(episodes) // 10)
    curve = binned_curve(episodes, timesteps=job["timesteps"], num_envs=job["num_envs"], bins=job["bins"])
    return {
        "task": job["task"],
        "algo": job["algo"],
        "seed": job["seed"],
        "frames": job["frames"],
        "num_envs": job["num_envs"],
        "timesteps": job["timesteps"],
        "config_hash": job["config_hash"],
        "tag": job["tag"],
        "final_return": f"{mean_return(episodes[-tenth:]):.6g}",
        "first_return": f"{mean_return(episodes[:tenth]):.6g}",
        "episodes": len(episodes),
        "wall_seconds": f"{wall:.1f}",
        "setup_seconds": f"{setup:.1f}",
        "threads": torch.get_num_threads(),
        "code": job["code"],
        "versions": f"skrl {skrl.__version__}, torch {torch.__version__}",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "curve": json.dumps(curve, separators=(",", ":")),
        "_leftovers": leftovers,
    }


# ---------------------------------------------------------------------------------------------------- the study


def code_version() -> str:
    """``<short commit>`` of the repository, ``+dirty`` when skrl_marl_ext/ has uncommitted changes."""
    try:
        commit = subprocess.run(
            ["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", REPO, "status", "--porcelain", "--", "skrl_marl_ext"], capture_output=True, text=True
        ).stdout.strip()
        return commit + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def read_rows(path: str) -> list[dict[str, str]]:
    if not os.path.isfile(path):
        return []
    with open(path, newline="") as file:
        reader = csv.DictReader(file)
        if reader.fieldnames and tuple(reader.fieldnames) != COLUMNS:
            raise SystemExit(
                f"learning_study: {path} has columns {reader.fieldnames}, this script writes {list(COLUMNS)}; "
                "use another --csv"
            )
        return list(reader)


def append_row(path: str, row: dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    new = not os.path.isfile(path) or os.path.getsize(path) == 0
    with open(path, "a", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=COLUMNS, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerow(row)
        file.flush()
        os.fsync(file.fileno())


def row_key(row: dict[str, Any]) -> tuple[str, str, int, int, str]:
    return (row["task"], row["algo"], int(row["seed"]), int(row["frames"]), row["config_hash"])


def plan(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The runs asked for, seeds outermost (so a partial study has every algo at the first seeds)."""
    jobs = []
    timesteps = args.timesteps if args.frames is None else max(1, -(-args.frames // args.num_envs))
    code = code_version()
    for task in args.tasks:
        for seed in args.seeds:
            for algo in args.algos:
                description = run_description(
                    VARIANTS[algo], task=task, num_envs=args.num_envs, timesteps=timesteps, tag=args.tag
                )
                jobs.append(
                    {
                        "task": task,
                        "algo": algo,
                        "seed": seed,
                        "num_envs": args.num_envs,
                        "timesteps": timesteps,
                        "frames": args.num_envs * timesteps,
                        "config_hash": config_hash(description),
                        "tag": args.tag,
                        "device": args.device,
                        "threads": args.threads,
                        "bins": args.bins,
                        "code": code,
                    }
                )
    return jobs


def _describe(job: dict[str, Any]) -> str:
    return f"{job['task']} {job['algo']} seed {job['seed']} ({job['frames']} frames, {job['config_hash']})"


def study(args: argparse.Namespace) -> int:
    done = {row_key(row) for row in read_rows(args.csv)}
    jobs = plan(args)
    todo = [job for job in jobs if row_key(job) not in done]
    for job in jobs:
        if row_key(job) in done:
            print(f"skip (in {args.csv}): {_describe(job)}", flush=True)
    at_a_time = 1 if args.in_process else args.jobs
    print(f"{len(todo)} runs to do, {len(jobs) - len(todo)} already done; {at_a_time} at a time", flush=True)
    if not todo:
        return 0
    if args.threads > 0:  # children start OpenMP/MKL with this many threads (torch.set_num_threads does the rest)
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[name] = str(args.threads)

    failures = 0
    finished = 0

    def record(job, row=None, error=None):
        nonlocal failures, finished
        finished += 1
        if error is not None:
            failures += 1
            print(f"[{finished}/{len(todo)}] FAILED {_describe(job)}:\n{error}", file=sys.stderr, flush=True)
            return
        append_row(args.csv, row)
        if row["_leftovers"]:
            print(f"  note: the run wrote {row['_leftovers']} into its experiment directory", flush=True)
        print(
            f"[{finished}/{len(todo)}] {_describe(job)}: return {row['first_return']} -> {row['final_return']} "
            f"({row['episodes']} episodes), {row['wall_seconds']} s training + {row['setup_seconds']} s setup",
            flush=True,
        )

    if args.in_process:
        for job in todo:
            try:
                record(job, run_one(job))
            except Exception:
                record(job, error=traceback.format_exc())
    else:
        _run_pool(todo, args.jobs, record)
    print(f"{finished - failures} runs written to {args.csv}, {failures} failed", flush=True)
    return 1 if failures else 0


def _run_pool(todo: list[dict[str, Any]], jobs: int, record: Callable[..., None]) -> None:
    """Run ``todo`` in ``jobs`` spawned processes, a fresh one per run; ``record`` each result as it comes."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    kwargs = {"max_tasks_per_child": 1} if sys.version_info >= (3, 11) else {}  # a fresh process per run
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context, **kwargs) as pool:
        futures = {pool.submit(run_one, job): job for job in todo}
        try:
            for future in as_completed(futures):
                job = futures[future]
                try:
                    record(job, future.result())
                except Exception:
                    record(job, error=traceback.format_exc())
        except KeyboardInterrupt:
            pool.shutdown(wait=False, cancel_futures=True)
            raise


# ---------------------------------------------------------------------------------------------------- report

_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
_T975.update({11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042})


def t_quantile(df: int) -> float:
    """Two-sided 95% quantile of Student's t with ``df`` degrees of freedom (scipy if installed, else a table)."""
    try:
        from scipy.stats import t

        return float(t.ppf(0.975, df))
    except ImportError:
        return next((_T975[d] for d in sorted(_T975) if d >= df), 1.96)


def interval(values: list[float]) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean and its 95% t-interval over ``values`` (nan bounds for fewer than 2)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, float("nan"), float("nan")
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile(n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def mean_curve(rows: list[dict[str, Any]]) -> tuple[list[float], list[float], list[float], list[float]]:
    """``(frames, mean, min, max)`` over the rows' curves, per x; bins without data in a run are left out there.

    Runs of one group share their bins; a run with other x values is interpolated onto the first run's.
    """
    import numpy as np

    curves = [json.loads(row["curve"]) for row in rows]
    xs = np.asarray(curves[0]["frames"], dtype=float)
    ys = []
    for curve in curves:
        x = np.asarray(curve["frames"], dtype=float)
        y = np.asarray([np.nan if v is None else v for v in curve["returns"]], dtype=float)
        if x.shape != xs.shape or not np.allclose(x, xs):
            keep = ~np.isnan(y)
            y = np.interp(xs, x[keep], y[keep], left=np.nan, right=np.nan) if keep.any() else np.full_like(xs, np.nan)
        ys.append(y)
    table = np.vstack(ys)
    valid = ~np.isnan(table).all(axis=0)
    table = table[:, valid]
    mean, low, high = np.nanmean(table, 0), np.nanmin(table, 0), np.nanmax(table, 0)
    return xs[valid].tolist(), mean.tolist(), low.tolist(), high.tolist()


def frames_to_reach(curve: tuple[list[float], ...], target: float) -> str:
    """Frames at the end of the first bin where the mean curve is at or above ``target`` ("not reached" if none)."""
    xs, mean = curve[0], curve[1]
    return next((_frames(x) for x, y in zip(xs, mean, strict=True) if y >= target), "not reached")


def _frames(x: float) -> str:
    return f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.0f}k" if x >= 1e4 else f"{x:.0f}"


def _fmt(value: float, digits: int = 2) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _slug(task: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "-", task).strip("-")


LEARNED_FRACTION = 0.25
"""A run "learned" when its return rose (first to final) by at least this fraction of the typical rise of its table."""


def learned(row: dict[str, str], typical_gain: float) -> bool:
    """Whether a run's return rose by at least :data:`LEARNED_FRACTION` of ``typical_gain`` (the median rise of the
    runs of its task and budget): a seed that never learns stays near its first return."""
    return float(row["final_return"]) - float(row["first_return"]) >= LEARNED_FRACTION * typical_gain


def report(args: argparse.Namespace) -> int:
    from bench_common import markdown_table

    rows = read_rows(args.csv)
    if not rows:
        print(f"learning_study: no runs in {args.csv}", file=sys.stderr)
        return 1
    # one table per (task, frames, num_envs); a variant run with several configs (tags) gets one line each
    groups: dict[tuple[str, int, int], dict[tuple[str, str, str], list[dict[str, str]]]] = {}
    for row in rows:
        group = groups.setdefault((row["task"], int(row["frames"]), int(row["num_envs"])), {})
        group.setdefault((row["algo"], row["tag"], row["config_hash"]), []).append(row)
    budgets_per_task: dict[str, int] = {}
    for task, _, _ in groups:
        budgets_per_task[task] = budgets_per_task.get(task, 0) + 1

    order = {name: i for i, name in enumerate(VARIANTS)}
    for (task, frames, num_envs), lines in sorted(groups.items()):
        keys = sorted(lines, key=lambda k: (order.get(k[0], len(order)), k[0], k[1], k[2]))
        labels = {}
        for algo, tag, digest in keys:
            label = algo + (f" [{tag}]" if tag else "")
            if sum(1 for a, t, _ in keys if (a, t) == (algo, tag)) > 1:
                label += f" ({digest})"
            labels[(algo, tag, digest)] = label
        curves = {key: mean_curve(lines[key]) for key in keys}
        reference = [key for key in keys if key[0] == REFERENCE]
        target = None
        if reference:
            target = interval([float(r["final_return"]) for r in lines[reference[0]]])[0]
        table = []
        gains = sorted(float(r["final_return"]) - float(r["first_return"]) for key in keys for r in lines[key])
        typical_gain = gains[len(gains) // 2]
        for key in keys:
            runs = sorted(lines[key], key=lambda r: int(r["seed"]))
            finals = [float(r["final_return"]) for r in runs]
            mean, low, high = interval(finals)
            first = interval([float(r["first_return"]) for r in runs])[0]
            seconds = sum(float(r["wall_seconds"]) for r in runs) / len(runs)
            table.append(
                [
                    labels[key],
                    len(runs),
                    _fmt(mean),
                    f"[{_fmt(low)}, {_fmt(high)}]",
                    " ".join(f"{v:.1f}" for v in finals),
                    _fmt(first),
                    sum(1 for r in runs if not learned(r, typical_gain)),
                    "-" if target is None else frames_to_reach(curves[key], target),
                    f"{seconds:.0f}",
                ]
            )
        timesteps = frames // num_envs
        bins = len(json.loads(lines[keys[0]][0]["curve"])["frames"])
        print(f"\n### {task}: {frames:,} frames ({num_envs} envs x {timesteps} steps) per run\n")
        reach = f"frames to reach {REFERENCE}'s mean ({_fmt(target)})" if target is not None else "frames to reach"
        header = [
            "algo",
            "n",
            "final return",
            "95% CI",
            "per seed",
            "first return",
            "no learning",
            reach,
            "train s/run",
        ]
        print(markdown_table(header, table))
        print(
            "\nfinal/first return: mean episode return per agent over the last/first 10% of a run's finished "
            "episodes, mean over seeds; 95% CI: Student's t over seeds; no learning: the seeds whose return rose by "
            f"less than {LEARNED_FRACTION:.0%} of the table's median rise; frames to reach: first bin of the mean "
            f"learning curve ({bins} bins of {_frames(frames / bins)} frames) at or above the target."
        )
        name = f"learning_{_slug(task)}" + (f"_{frames}" if budgets_per_task[task] > 1 else "") + ".png"
        path = os.path.join(args.images_dir, name)
        plot_group(curves, labels, path=path, title=f"{task}, {num_envs} envs x {timesteps} steps", target=target)
        print(f"\nplot: {path}")
    return 0


def plot_group(curves, labels, *, path: str, title: str, target: float | None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig, ax = plt.subplots(figsize=(7.0, 4.4))
    for key, (xs, mean, low, high) in curves.items():
        (line,) = ax.plot(xs, mean, linewidth=1.8, label=labels[key])
        ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.15, linewidth=0)
    if target is not None:
        ax.axhline(target, color="gray", linestyle=":", linewidth=1.0, label=f"{REFERENCE} final mean")
    ax.set_xlabel("env frames (steps x envs)")
    ax.set_ylabel("episode return per agent")
    ax.set_title(f"{title}\nmean over seeds, band: min-max over seeds", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------- CLI


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog="Variants: " + "; ".join(f"{name}: {v.note}" for name, v in VARIANTS.items()),
    )
    parser.add_argument("--tasks", default=TASKS[0], help=f"comma-separated env specs, e.g. {','.join(TASKS)}")
    parser.add_argument("--algos", default=",".join(DEFAULT_ALGOS), help=f"comma-separated of {','.join(VARIANTS)}")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds, or a range such as 0-4")
    parser.add_argument("--num-envs", type=int, default=128, help="envs stepped as one batch")
    parser.add_argument("--timesteps", type=int, default=4000, help="env steps per run (frames = steps x envs)")
    parser.add_argument("--frames", type=int, default=None, help="env frames per run (overrides --timesteps)")
    parser.add_argument("--device", default="cpu", help="torch device of env and agent")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run (0: torch's default)")
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (one process each)")
    parser.add_argument("--bins", type=int, default=20, help="bins of the stored learning curve")
    parser.add_argument("--tag", default="", help="free text stored with the runs and part of the config hash")
    parser.add_argument("--csv", default=DEFAULT_CSV, help="results file (appended to; read by --report)")
    parser.add_argument("--in-process", action="store_true", help="run in this process, one after another (debug)")
    parser.add_argument("--report", action="store_true", help="no training: tables and plots from --csv")
    parser.add_argument("--images-dir", default=DEFAULT_IMAGES, help="where --report writes learning_<task>.png")
    args = parser.parse_args(argv)
    args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    args.algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    unknown = [a for a in args.algos if a not in VARIANTS]
    if unknown:
        parser.error(f"unknown --algos {unknown}; choose from {', '.join(VARIANTS)}")
    seeds = []
    for part in args.seeds.split(","):
        low, sep, high = part.strip().partition("-")
        seeds += list(range(int(low), int(high) + 1)) if sep else [int(low)]
    args.seeds = seeds
    if args.num_envs < 1 or args.timesteps < 1 or (args.frames is not None and args.frames < 1) or args.jobs < 1:
        parser.error("--num-envs, --timesteps, --frames and --jobs must be positive")
    if args.bins < 1:
        parser.error("--bins must be positive")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    return report(args) if args.report else study(args)


if __name__ == "__main__":
    sys.exit(main())
