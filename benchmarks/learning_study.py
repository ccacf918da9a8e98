"""Learning study: this package's agents against skrl 2.1.1's own, at equal config, over seeds (resumable).

Every run trains one variant ("algo") on one task for one seed with skrl's ``SequentialTrainer`` and appends one row
to a CSV file: the mean episode return per agent over the first and the last 10% of finished episodes (as
``skrl-marl train`` prints them), the wall time, and a binned learning curve (mean episode return per agent against
env frames) so that tables and plots can be redrawn without training again. A run whose (task, algo, seed, frames,
config hash) is already in the CSV is skipped, so an interrupted study goes on where it stopped. Each run is a fresh
process (``spawn``), so global RNGs and thread settings do not leak between runs; ``--jobs 2`` runs two at a time.
A run holds the lock of a folder of its own under ``--work-dir`` (default ``runs/`` beside the CSV) while it trains,
so two studies side by side never train the same run; a run with evaluation (the MaMuJoCo tasks) also keeps its state
there at its evaluation points, and a killed study goes on from it (:class:`RunState`).

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

MaMuJoCo (HAPPO against MAPPO as HARL measured it; issue 40). On ``mamujoco:`` tasks the variants are
:data:`MAMUJOCO_VARIANTS`, built through our Runner from the configs the package ships with HARL's tuned values
(``skrl_marl_ext/configs/happo_mamujoco.yaml``, ``mappo_mamujoco.yaml``, ``maddpg_mamujoco.yaml``; HARL's per-task
values where it tuned them, :data:`HARL_TASK_OVERRIDES`), on HARL's observations (``agent_obsk=0``):

- ``happo``: a policy per agent and one team critic, 20 envs;
- ``mappo``: one policy and one critic shared by the agents (HARL's MAPPO), 20 envs;
- ``mappo-own``: MAPPO with a policy and a critic per agent, 20 envs;
- ``ippo``: ``mappo-own`` with critics of the agents' own observations, 20 envs;
- ``maddpg``: HARL's MADDPG config, 10 envs, one gradient step per step.

Each run is evaluated along the way (``--eval-points``, default 20, the last at its end) with the policies' mean
actions on ``--eval-episodes`` (default 10) envs of its own; the row holds the final evaluation return, the
evaluation curve and the CPU time of training (:data:`EVAL_COLUMNS`), in ``benchmarks/results/learning_mamujoco.csv``
(the default ``--csv`` of these tasks). The study: the four on-policy variants on 3 tasks, 3 seeds each (5 on
Walker2d, where 3 left HAPPO against MAPPO unsure), and MADDPG on HalfCheetah 2x3 (a gradient step of 1000 samples
at every step of its 10 envs, about ten times an on-policy run's CPU time per frame), 2M frames per run. The runs
start task by task, seed by seed, so the first task's table fills first; two commands side by side on the same runs
share them through the runs' locks. Then the tables, plots and Welch's t-tests of HAPPO against each variant::

    nohup python benchmarks/learning_study.py \\
        --tasks mamujoco:HalfCheetah-2x3,mamujoco:Walker2d-2x3,mamujoco:HalfCheetah-6x1 \\
        --algos happo,mappo,mappo-own,ippo --seeds 0-2 --frames 2000000 --jobs 2 > mamujoco_study.log 2>&1 &
    python benchmarks/learning_study.py --tasks mamujoco:Walker2d-2x3 --algos happo,mappo,mappo-own,ippo \\
        --seeds 0-4 --frames 2000000 --jobs 2
    # MADDPG, the same command in two or three shells (one run each):
    python benchmarks/learning_study.py --tasks mamujoco:HalfCheetah-2x3 --algos maddpg --seeds 0-2 \\
        --frames 2000000 --jobs 1
    python benchmarks/learning_study.py --report --csv benchmarks/results/learning_mamujoco.csv

The pilot that sized it (one seed, 50k frames, five evaluations, into a scratch CSV)::

    python benchmarks/learning_study.py --tasks mamujoco:HalfCheetah-2x3 --algos happo,mappo,maddpg --seeds 0 \\
        --frames 50000 --eval-points 5 --csv /tmp/mamujoco_pilot.csv --jobs 2
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import csv
import dataclasses
import hashlib
import importlib.util
import io
import json
import math
import os
import re
import shutil
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

EVAL_COLUMNS = ("eval_return", "eval_curve", "eval_seconds", "cpu_seconds")
"""Columns after :data:`COLUMNS` of the runs with deterministic evaluation (the MaMuJoCo tasks): ``cpu_seconds``, the
CPU time of the training loop (the process's, as ``wall_seconds`` without the evaluations: on a shared machine the
measure of its cost that other processes do not inflate); ``eval_return``, the
mean return per agent of ``--eval-episodes`` episodes with the policies' mean actions at the end of training;
``eval_curve``, JSON ``{"frames": [...], "returns": [...]}`` of every evaluation point (the last one is
``eval_return``) and the episodes of each; ``eval_seconds``, their time (not in ``wall_seconds``). A CSV holds rows of
one kind."""

MAMUJOCO = "mamujoco:"
MAMUJOCO_TASKS = ("mamujoco:HalfCheetah-2x3", "mamujoco:HalfCheetah-6x1", "mamujoco:Walker2d-2x3")
MAMUJOCO_CSV = os.path.join(HERE, "results", "learning_mamujoco.csv")
MAMUJOCO_ENV_ARGS = {"agent_obsk": 0}
"""Env arguments of the MaMuJoCo tasks: HARL's tuned configs observe each agent's own joints only."""
MAMUJOCO_REFERENCE = "mappo"
"""The MaMuJoCo variant the report's "frames to reach" column aims at (HARL compares HAPPO with its shared MAPPO)."""
EVAL_SEED_OFFSET = 10_000
"""The evaluation envs of a run of seed ``s`` start from seed ``s + EVAL_SEED_OFFSET``."""
EVAL_EPISODES = 10
EVAL_POINTS = 20
"""Defaults of ``--eval-episodes`` and ``--eval-points`` on MaMuJoCo tasks (HARL evaluates every 100k frames)."""


def is_mamujoco(task: str) -> bool:
    return task.startswith(MAMUJOCO)


# ---------------------------------------------------------------------------------------------------- variants


@dataclasses.dataclass(frozen=True)
class Variant:
    """One "algo" of the study: how to build its agent, and what its config hash covers."""

    builder: str
    """Key of :data:`BUILDERS`."""
    algo: str
    """``mappo``, ``ippo``, ``happo``, ``maddpg``, ``masac`` or ``hasac``: the default config of ``skrl-marl train`` it
    starts from."""
    impl: str = "ours"
    """``ours`` (skrl_marl_ext) or ``skrl`` (skrl's built-in agent)."""
    overrides: tuple[tuple[str, Any], ...] = ()
    """Agent config fields set on top of the default config (preprocessors by name, see :data:`PREPROCESSORS`)."""
    note: str = ""
    config: str = ""
    """The package config it starts from, ``skrl_marl_ext/configs/<config>.yaml``; empty: ``<algo>.yaml``."""
    num_envs: int | None = None
    """Envs of its runs; None: ``--num-envs`` (with ``--frames``, the steps are the frames over the envs)."""


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
    "masac": Variant(
        "runner", "masac", note="skrl_marl_ext.MASAC, configs/masac.yaml (relu models, per-agent twin critics)"
    ),
    "hasac": Variant("runner", "hasac", note="skrl_marl_ext.HASAC, configs/hasac.yaml (relu models, one team critic)"),
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
OFF_POLICY = ("maddpg", "masac", "hasac")
"""The variants' algorithms with a replay (their runs are built from their own configs through our Runner)."""

HARL_ENVS = 20
"""HARL's n_rollout_threads of its on-policy MaMuJoCo configs (MADDPG's: 10, in its variant)."""

MAMUJOCO_VARIANTS: dict[str, Variant] = {
    "happo": Variant(
        "runner",
        "happo",
        config="happo_mamujoco",
        num_envs=HARL_ENVS,
        note="HAPPO, configs/happo_mamujoco.yaml (HARL's: a policy per agent, one team critic)",
    ),
    "mappo": Variant(
        "runner",
        "mappo",
        config="mappo_mamujoco",
        num_envs=HARL_ENVS,
        note="MAPPO, configs/mappo_mamujoco.yaml (HARL's: one policy and one critic shared by the agents)",
    ),
    "mappo-own": Variant(
        "runner",
        "mappo",
        config="mappo_mamujoco",
        num_envs=HARL_ENVS,
        overrides=(("models.share_across_agents", False),),
        note="MAPPO, configs/mappo_mamujoco.yaml with a policy and a critic per agent",
    ),
    "ippo": Variant(
        "runner",
        "ippo",
        config="mappo_mamujoco",
        num_envs=HARL_ENVS,
        overrides=(("class", "IPPO"), ("models.share_across_agents", False), ("models.value.input", "observations")),
        note="IPPO, configs/mappo_mamujoco.yaml with a policy and a critic of its observations per agent",
    ),
    "maddpg": Variant(
        "runner",
        "maddpg",
        config="maddpg_mamujoco",
        num_envs=10,
        note="MADDPG, configs/maddpg_mamujoco.yaml (HARL's, 10 envs, one-step targets)",
    ),
    "hasac": Variant(
        "runner",
        "hasac",
        config="hasac_mamujoco",
        num_envs=HARL_ENVS,
        note="HASAC, configs/hasac_mamujoco.yaml (HARL's: a policy per agent, one team soft critic, one-step targets)",
    ),
    "hasac-n10": Variant(
        "runner",
        "hasac",
        config="hasac_mamujoco",
        num_envs=HARL_ENVS,
        overrides=(("n_step", 10),),
        note="HASAC, configs/hasac_mamujoco.yaml with HARL's 10-step soft targets (n_step 10)",
    ),
    "hasac-10envs": Variant(
        "runner",
        "hasac",
        config="hasac_mamujoco",
        num_envs=10,
        # HARL's buffer (1M transitions) and warm-up (10000) over 10 envs, as configs/maddpg_mamujoco.yaml has them
        overrides=(("memory.memory_size", 100000), ("random_timesteps", 1000), ("learning_starts", 1000)),
        note="HASAC, configs/hasac_mamujoco.yaml on 10 envs (buffer and warm-up in transitions kept): MADDPG's "
        "ratio of gradient steps to frames",
    ),
    "masac": Variant(
        "runner",
        "masac",
        config="hasac_mamujoco",
        num_envs=HARL_ENVS,
        overrides=(("class", "MASAC"), ("update_order", REMOVE)),
        note="MASAC, configs/hasac_mamujoco.yaml with every policy stepped at once",
    ),
}
"""The variants of the MaMuJoCo tasks (the names of :data:`VARIANTS` there mean these): HARL's tuned configs as the
package ships them, through our Runner."""
MAMUJOCO_ALGOS = ("happo", "mappo", "mappo-own", "ippo", "maddpg", "hasac", "masac")
"""The default variants: the shipped configs (``hasac-n10`` and ``hasac-10envs`` are candidates, run by name)."""

HARL_TASK_OVERRIDES: dict[str, tuple[tuple[str, Any], ...]] = {
    # HARL's tuned Walker2d-v2-2x3 HAPPO and MAPPO (its lr and critic_lr 1e-3, linear decay to 0); HalfCheetah-6x1
    # has no tuned HAPPO/MAPPO in HARL and takes HalfCheetah-2x3's, the shipped configs
    "mamujoco:Walker2d-2x3": (
        ("learning_epochs", 5),
        ("mini_batches", 2),
        ("learning_rate", 1e-3),
        ("entropy_loss_scale", 0.0),
        ("learning_rate_scheduler", "LinearLR"),
    ),
}
"""Agent fields of the on-policy MaMuJoCo variants that HARL tuned per task (its ``use_linear_lr_decay`` is
``LinearLR`` to 0 over the run's learning epochs, see :func:`task_overrides`)."""


def variants_for(task: str) -> dict[str, Variant]:
    """The variants a task's runs are named from: :data:`MAMUJOCO_VARIANTS` on MaMuJoCo, else :data:`VARIANTS`."""
    return MAMUJOCO_VARIANTS if is_mamujoco(task) else VARIANTS


def task_overrides(variant: Variant, *, task: str, timesteps: int) -> tuple[tuple[str, Any], ...]:
    """The per-task overrides of :data:`HARL_TASK_OVERRIDES` for an on-policy variant (none for the off-policy ones),
    with ``LinearLR``'s arguments for a run of ``timesteps`` steps (one scheduler step per learning epoch)."""
    if variant.algo in OFF_POLICY:
        return ()
    overrides = HARL_TASK_OVERRIDES.get(task, ())
    values = dict(overrides)
    if values.get("learning_rate_scheduler") != "LinearLR":
        return overrides
    rollouts = runner_config(variant)["agent"]["rollouts"]
    epochs = values.get("learning_epochs", runner_config(variant)["agent"]["learning_epochs"])
    total = max(1, timesteps // rollouts) * epochs
    return (
        *overrides,
        ("learning_rate_scheduler_kwargs", {"start_factor": 1.0, "end_factor": 0.0, "total_iters": total}),
    )


def default_config(name: str) -> dict[str, Any]:
    """``skrl_marl_ext/configs/<name>.yaml`` (read from the installed package without importing it, i.e. torch)."""
    import yaml

    spec = importlib.util.find_spec("skrl_marl_ext")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("learning_study: skrl_marl_ext is not installed (pip install -e . in the repository)")
    with open(os.path.join(list(spec.submodule_search_locations)[0], "configs", f"{name}.yaml")) as file:
        return yaml.safe_load(file)


def agent_config(variant: Variant) -> dict[str, Any]:
    """The variant's agent config, symbolic (class names as strings): the YAML's agent section plus overrides."""
    cfg = dict(default_config(variant.algo)["agent"])
    cfg.pop("class", None)
    cfg.pop("experiment", None)
    cfg.update(dict(variant.overrides))
    return cfg


def runner_config(variant: Variant, overrides: tuple[tuple[str, Any], ...] = ()) -> dict[str, Any]:
    """A runner variant's whole config: ``configs/<config or algo>.yaml`` with the variant's overrides and then
    ``overrides``, which name agent fields (``"batch_size"``) or, dotted, a key of another section
    (``"memory.memory_size"``, ``"models.value.input"``)."""
    config = copy.deepcopy(default_config(variant.config or variant.algo))
    for key, value in (*variant.overrides, *overrides):
        *path, field = key.split(".") if "." in key else ("agent", key)
        section = config
        for part in path:
            section = section[part]
        if value == REMOVE:
            section.pop(field, None)
        else:
            section[field] = value
    return config


def run_description(
    variant: Variant,
    *,
    task: str,
    num_envs: int,
    timesteps: int,
    tag: str,
    eval_episodes: int = 0,
    eval_points: int = 0,
) -> dict[str, Any]:
    """Everything that defines a run apart from its seed (what the config hash covers). MaMuJoCo runs also hold
    their env arguments, per-task overrides and evaluation."""
    mamujoco = is_mamujoco(task)
    if variant.builder == "runner":
        config = runner_config(variant, task_overrides(variant, task=task, timesteps=timesteps) if mamujoco else ())
    else:
        config = {"agent": agent_config(variant), "models": MODEL}
    description = {
        "builder": variant.builder,
        "algo": variant.algo,
        "impl": variant.impl,
        "config": config,
        "task": task,
        "num_envs": num_envs,
        "timesteps": timesteps,
        "tag": tag,
    }
    if mamujoco:
        description.update(env_kwargs=MAMUJOCO_ENV_ARGS, eval_episodes=eval_episodes, eval_points=eval_points)
    return description


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


def build_runner(env, *, variant: Variant, seed: int, timesteps: int, directory: str, config: dict | None = None):
    """An agent of ours from ``skrl_marl_ext/configs/<algo>.yaml`` (or ``config``, the run's whole config) through our
    Runner (MADDPG, the MaMuJoCo variants): returns the trainer."""
    from skrl_marl_ext.runner import Runner

    cfg = copy.deepcopy(config) if config is not None else runner_config(variant)
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
"""``builder(env, *, variant, seed, timesteps, directory) -> trainer`` (anything with ``train()``; the runner builder
also takes the run's ``config``)."""


def evaluation_steps(*, timesteps: int, points: int) -> list[int]:
    """The steps (counted from 1) after which a run is evaluated: ``points`` evenly spaced, the last at its end."""
    return sorted({max(1, round(timesteps * (i + 1) / points)) for i in range(points)})


def deterministic_return(agent, env, *, timestep: int, timesteps: int, max_steps: int = 100_000) -> float:
    """Mean return per agent of one episode in each of ``env``'s copies, acting with the policies' mean actions
    (``outputs["mean_actions"]``, the agent in evaluation mode), from a reset of ``env``; the agent is back in
    training mode after. A copy's later episodes are not counted, so early ends do not weigh more. HARL's
    evaluation: ``eval_episodes`` episodes of the deterministic policy on envs of their own."""
    import torch

    from skrl_marl_ext.keys import MEAN_ACTIONS_KEY

    agent.enable_training_mode(False)
    observations, _ = env.reset()
    states = env.state()
    returns = torch.zeros(env.num_envs)
    ended = torch.zeros(env.num_envs, dtype=torch.bool)
    with torch.no_grad():
        for _ in range(max_steps):
            actions, outputs = agent.act(observations, states, timestep=timestep, timesteps=timesteps)
            observations, rewards, terminated, truncated, _ = env.step(outputs.get(MEAN_ACTIONS_KEY, actions))
            states = env.state()
            uids = list(rewards)
            reward = sum(rewards[uid].view(-1).float().cpu() for uid in uids) / len(uids)
            returns += torch.where(ended, 0.0, reward)
            for uid in uids:
                ended |= (terminated[uid] | truncated[uid]).view(-1).cpu()
            if bool(ended.all()):
                break
    agent.enable_training_mode(True)
    if not bool(ended.all()):
        raise RuntimeError(
            f"evaluation: {int((~ended).sum())} of {env.num_envs} episodes did not end in {max_steps} steps"
        )
    return float(returns.mean())


class RunState:
    """A run in progress, kept in a folder of its own under ``--work-dir`` so that a killed study loses at most the
    steps since the run's last evaluation point.

    At each evaluation point that ends an on-policy rollout (every point for MADDPG, whose replay goes with it; the
    run's last step always) the folder gets the agent's checkpoint (``agent_<step>.pt``, written whole or not at all)
    and then ``progress.json``, which names it and holds the rest: the steps done, the finished episodes, the
    evaluation curve, the seconds spent, and torch's, numpy's and Python's RNG states. The next study that plans the
    run goes on from there: the agent loaded (its schedules, optimisers, preprocessors and MADDPG's replay continue),
    the RNGs restored, the envs made anew from seed ``seed + step`` (the episodes under way at the kill are lost, as
    with ``skrl-marl train --resume``). The row's ``curve`` then lists the frames it was resumed at
    (``resumed_at_frames``).
    """

    PROGRESS = "progress.json"

    def __init__(self, folder: str) -> None:
        self.folder = folder
        path = os.path.join(folder, self.PROGRESS)
        self.saved: dict[str, Any] | None = None
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as file:
                self.saved = json.load(file)

    @property
    def step(self) -> int:
        """The steps the kept state has done (0 for a new run)."""
        return self.saved["step"] if self.saved else 0

    def restore(self, agent) -> None:
        """Load the kept agent and RNG states (after the trainer is built: the Runner seeds the RNGs)."""
        if not self.saved:
            return
        import random

        import numpy as np
        import torch

        agent.load(os.path.join(self.folder, self.saved["agent"]))
        rng = self.saved["rng"]
        torch.set_rng_state(torch.tensor(rng["torch"], dtype=torch.uint8))
        name, keys, *rest = rng["numpy"]
        np.random.set_state((name, np.asarray(keys, dtype=np.uint32), *rest))
        version, internal, gauss = rng["random"]
        random.setstate((version, tuple(internal), gauss))

    def write(self, agent, *, step: int, record: dict[str, Any]) -> None:
        """Keep the agent at ``step`` and ``record`` (episodes, evaluation curve, seconds, resumes) with the RNGs."""
        import random

        import numpy as np
        import torch

        from skrl_marl_ext.checkpoints.files import write_text

        name = f"agent_{step}.pt"
        agent.save(os.path.join(self.folder, name))
        numpy_name, keys, *rest = np.random.get_state()
        rng = {
            "torch": torch.get_rng_state().tolist(),
            "numpy": [numpy_name, keys.tolist(), *rest],
            "random": random.getstate(),
        }
        previous = self.saved["agent"] if self.saved else None
        self.saved = {"step": step, "agent": name, "rng": rng, **record}
        write_text(os.path.join(self.folder, self.PROGRESS), json.dumps(self.saved, separators=(",", ":")))
        if previous and previous != name:
            os.remove(os.path.join(self.folder, previous))


def train_with_evaluation(
    trainer, eval_env, *, timesteps: int, points: int, keep: RunState | None = None, setup: float = 0.0, code: str = ""
) -> dict[str, Any]:
    """Train as skrl's ``SequentialTrainer.train`` does (each step :func:`skrl_marl_ext.trainers.interact`), with
    :func:`deterministic_return` on ``eval_env`` at :func:`evaluation_steps`; with ``keep``, from the state it holds,
    writing the run's state at the evaluation points (:class:`RunState`).

    Returns the whole run's record: ``episodes`` (``(step, returns)`` of the training env, an
    :class:`~skrl_marl_ext.envs.EpisodeRecorder`), ``eval_curve`` (frames of the training env, returns, episodes per
    point), the seconds (wall and CPU) of ``train`` (without the evaluations) and ``eval``, and of ``setup`` (each
    start's, given), ``resumed_at`` (steps) and ``codes`` (each start's code version, given, once each).
    """
    from skrl_marl_ext.trainers import interact

    agent, env = trainer.agents, trainer.env
    done = keep.step if keep is not None else 0
    if keep is not None:
        keep.restore(agent)
    record: dict[str, Any] = {
        "episodes": [],
        "eval_curve": {"frames": [], "returns": [], "episodes": eval_env.num_envs},
        "seconds": {"train": 0.0, "train_cpu": 0.0, "eval": 0.0, "eval_cpu": 0.0, "setup": 0.0},
        "resumed_at": [],
        "codes": [],
    }
    if done:
        record = {key: copy.deepcopy(keep.saved[key]) for key in record}
        record["resumed_at"].append(done)
    seconds = record["seconds"]
    seconds["setup"] += setup
    record["codes"] += [code] if code not in record["codes"] else []
    rollouts = getattr(agent.cfg, "rollouts", None)  # on-policy: a state mid-rollout would drop the rollout's steps
    at = set(evaluation_steps(timesteps=timesteps, points=points))
    start, cpu_start = time.perf_counter(), time.process_time()

    def account(key: str) -> None:
        nonlocal start, cpu_start
        now, cpu_now = time.perf_counter(), time.process_time()
        seconds[key] += now - start
        seconds[f"{key}_cpu"] += cpu_now - cpu_start
        start, cpu_start = now, cpu_now

    agent.enable_training_mode(True)
    observations, _ = env.reset()
    states = env.state()
    for timestep in range(timesteps - done):  # the agent counts the steps done before (its progress) on top
        step = interact(agent, env, observations, states, timestep=timestep, timesteps=timesteps - done)
        observations, states = step.next_observations, step.next_states  # the batched envs reset copies in place
        run_step = done + timestep + 1
        if run_step not in at:
            continue
        account("train")
        value = deterministic_return(agent, eval_env, timestep=timestep, timesteps=timesteps - done)
        record["eval_curve"]["frames"].append(run_step * env.num_envs)
        record["eval_curve"]["returns"].append(float(f"{value:.6g}"))
        account("eval")
        if keep is not None and (not rollouts or run_step % rollouts == 0 or run_step == timesteps):
            episodes = record["episodes"] + [[done + s, r] for s, r in env.episodes]
            keep.write(agent, step=run_step, record={**record, "episodes": episodes})
            account("train")  # writing the state is part of the run's cost
    account("train")
    record["episodes"] += [[done + s, r] for s, r in env.episodes]
    return record


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


def run_one(job: dict[str, Any], keep: RunState | None = None) -> dict[str, Any]:
    """Train one (task, algo, seed), a run with evaluation from ``keep``'s state when it holds one; return its CSV
    row."""
    import logging
    import tempfile

    import torch

    if job["threads"] > 0:
        torch.set_num_threads(job["threads"])
    import skrl

    skrl.logger.setLevel(logging.WARNING)
    from skrl_marl_ext.envs import EpisodeRecorder, make_env

    variant = variants_for(job["task"])[job["algo"]]
    env_kwargs = job.get("env_kwargs") or {}
    evaluate = job.get("eval_episodes", 0) > 0
    keep = keep if evaluate else None
    done = keep.step if keep is not None else 0  # a resumed run's envs start anew from seed + steps done
    start = time.perf_counter()
    env = EpisodeRecorder(
        make_env(job["task"], num_envs=job["num_envs"], device=job["device"], seed=job["seed"] + done, **env_kwargs)
    )
    if evaluate:  # envs of their own, seeded apart from the training envs
        eval_seed = job["seed"] + EVAL_SEED_OFFSET + done
        eval_env = make_env(
            job["task"], num_envs=job["eval_episodes"], device=job["device"], seed=eval_seed, **env_kwargs
        )
    extra = {}
    if variant.builder == "runner" and "config" in job:
        extra = {"config": copy.deepcopy(job["config"])}
        if extra["config"]["agent"].get("class") == "MADDPG":  # its replay goes into the kept state
            extra["config"]["agent"]["checkpoint_replay"] = True
    with tempfile.TemporaryDirectory(prefix="learning_study_") as directory:
        trainer = BUILDERS[variant.builder](
            env, variant=variant, seed=job["seed"], timesteps=job["timesteps"], directory=directory, **extra
        )
        setup = time.perf_counter() - start
        if evaluate:
            record = train_with_evaluation(
                trainer,
                eval_env,
                timesteps=job["timesteps"],
                points=job["eval_points"],
                keep=keep,
                setup=setup,
                code=job["code"],
            )
            seconds = record["seconds"]
            wall, cpu, setup, episodes = seconds["train"], seconds["train_cpu"], seconds["setup"], record["episodes"]
        else:
            start = time.perf_counter()
            trainer.train()
            wall, episodes = time.perf_counter() - start, env.episodes
        leftovers = [name for name in os.listdir(directory) if name != "run"] + (
            os.listdir(os.path.join(directory, "run")) if os.path.isdir(os.path.join(directory, "run")) else []
        )
    tenth = max(1, len(episodes) // 10)
    curve = binned_curve(episodes, timesteps=job["timesteps"], num_envs=job["num_envs"], bins=job["bins"])
    evaluation = {}
    if evaluate:
        eval_env.close()
        eval_curve = record["eval_curve"]
        if record["resumed_at"]:
            curve["resumed_at_frames"] = [step * job["num_envs"] for step in record["resumed_at"]]
        evaluation = {
            "eval_return": f"{eval_curve['returns'][-1]:.6g}",
            "eval_curve": json.dumps(eval_curve, separators=(",", ":")),
            "eval_seconds": f"{seconds['eval']:.1f}",
            "cpu_seconds": f"{cpu:.1f}",
        }
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
        "code": ",".join(record["codes"]) if evaluate else job["code"],
        "versions": f"skrl {skrl.__version__}, torch {torch.__version__}",
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "curve": json.dumps(curve, separators=(",", ":")),
        **evaluation,
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


def csv_columns(path: str) -> tuple[str, ...] | None:
    """The columns of the CSV at ``path`` (None for a missing or empty file): :data:`COLUMNS`, or those and
    :data:`EVAL_COLUMNS`.

    :raises SystemExit: On other columns.
    """
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return None
    with open(path, newline="") as file:
        header = tuple(next(csv.reader(file), ()))
    if header not in (COLUMNS, COLUMNS + EVAL_COLUMNS):
        raise SystemExit(
            f"learning_study: {path} has columns {list(header)}, this script writes {list(COLUMNS)} (and "
            f"{list(EVAL_COLUMNS)} with evaluation); use another --csv"
        )
    return header


def read_rows(path: str) -> list[dict[str, str]]:
    """The complete rows of the CSV at ``path``: a last line without its newline (a write cut short) is left out."""
    if csv_columns(path) is None:
        return []
    with open(path, newline="") as file:
        text = file.read()
    if not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    return list(csv.DictReader(io.StringIO(text, newline="")))


def append_row(path: str, row: dict[str, Any]) -> None:
    """Append ``row`` to the CSV at ``path`` (with the header when the file is new: the evaluation columns when the row
    has them) in one ``write`` and ``fsync``; a last line left without its newline by a write cut short is cut off
    first, so a killed study never leaves half a row before the next one."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    columns = csv_columns(path)
    wanted = COLUMNS + EVAL_COLUMNS if "eval_return" in row else COLUMNS
    if columns is not None and columns != wanted:
        raise SystemExit(
            f"learning_study: {path} has columns {list(columns)}, the row {list(wanted)}; use another --csv"
        )
    text = io.StringIO(newline="")
    writer = csv.DictWriter(text, fieldnames=wanted, extrasaction="ignore", lineterminator="\n")
    if columns is None:
        writer.writeheader()
    writer.writerow(row)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        size = os.fstat(descriptor).st_size
        if columns is not None and size and os.pread(descriptor, 1, size - 1) != b"\n":
            with open(path, "rb") as file:  # the last line is cut: keep up to the newline before it
                os.ftruncate(descriptor, file.read().rfind(b"\n") + 1)
        os.write(descriptor, text.getvalue().encode())
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def row_key(row: dict[str, Any]) -> tuple[str, str, int, int, str]:
    return (row["task"], row["algo"], int(row["seed"]), int(row["frames"]), row["config_hash"])


def plan(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The runs asked for, seeds outermost (so a partial study has every algo at the first seeds)."""
    jobs = []
    code = code_version()
    for task in args.tasks:
        for seed in args.seeds:
            for algo in args.algos:
                variant = variants_for(task)[algo]
                num_envs = variant.num_envs or args.num_envs
                timesteps = args.timesteps if args.frames is None else max(1, -(-args.frames // num_envs))
                evaluation = {}
                if is_mamujoco(task):
                    evaluation = {"eval_episodes": args.eval_episodes, "eval_points": args.eval_points}
                description = run_description(
                    variant, task=task, num_envs=num_envs, timesteps=timesteps, tag=args.tag, **evaluation
                )
                extra = {}
                if is_mamujoco(task):  # the worker builds the config that was hashed
                    extra = {"env_kwargs": description["env_kwargs"], "config": description["config"], **evaluation}
                jobs.append(
                    {
                        "task": task,
                        "algo": algo,
                        "seed": seed,
                        "num_envs": num_envs,
                        "timesteps": timesteps,
                        "frames": num_envs * timesteps,
                        "config_hash": config_hash(description),
                        "tag": args.tag,
                        "device": args.device,
                        "threads": args.threads,
                        "bins": args.bins,
                        "code": code,
                        "csv": args.csv,
                        "work_dir": os.path.abspath(args.work_dir),
                        **extra,
                    }
                )
    return jobs


def run_folder(job: dict[str, Any]) -> str:
    """The folder under ``--work-dir`` of the run ``job`` while it is in progress (:class:`RunState`)."""
    name = f"{_slug(job['task'])}_{job['algo']}_seed{job['seed']}_{job['frames']}_{job['config_hash']}"
    return os.path.join(job["work_dir"], name)


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    """Train the run ``job`` (:func:`run_one`) and append its row to ``job["csv"]``, holding the lock of its
    :func:`run_folder` throughout: a run another process holds, or whose row is in the CSV by now, is skipped
    (``{"_skipped": why}``). The folder goes once the row is written. Runs in a process of its own."""
    from skrl_marl_ext.cli.errors import UsageError
    from skrl_marl_ext.cli.run_folder import RunLock

    folder = run_folder(job)
    os.makedirs(folder, exist_ok=True)
    with contextlib.ExitStack() as held:
        try:  # only a lock held elsewhere skips the run; an error of the run itself fails it
            held.enter_context(RunLock(folder, option=f"--work-dir {job['work_dir']}"))
        except UsageError as error:
            return {"_skipped": str(error)}
        if any(row_key(row) == row_key(job) for row in read_rows(job["csv"])):
            return {"_skipped": f"in {job['csv']} by now"}
        state = RunState(folder)
        if state.step:
            print(f"resume {_describe(job)} from step {state.step} of {job['timesteps']}", flush=True)
        row = run_one(job, state)
        append_row(job["csv"], row)
        shutil.rmtree(folder)
    return row


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
    evaluated = {job.get("eval_episodes", 0) > 0 for job in todo}
    columns = csv_columns(args.csv)
    if len(evaluated) > 1 or (columns is not None and (columns != COLUMNS) != evaluated.pop()):
        raise SystemExit(
            f"learning_study: runs with deterministic evaluation (MaMuJoCo tasks) and runs without go to CSVs of "
            f"their own ({args.csv} holds {'no ' if columns == COLUMNS else ''}evaluation columns); run them with "
            "separate --csv files"
        )
    if args.threads > 0:  # children start OpenMP/MKL with this many threads (torch.set_num_threads does the rest)
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[name] = str(args.threads)

    failures = skipped = finished = 0

    def record(job, row=None, error=None):
        nonlocal failures, skipped, finished
        finished += 1
        if error is not None:
            failures += 1
            print(f"[{finished}/{len(todo)}] FAILED {_describe(job)}:\n{error}", file=sys.stderr, flush=True)
            return
        if "_skipped" in row:
            skipped += 1
            print(f"[{finished}/{len(todo)}] skip {_describe(job)}: {row['_skipped']}", flush=True)
            return
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
                record(job, run_job(job))
            except Exception:
                record(job, error=traceback.format_exc())
    else:
        _run_pool(todo, args.jobs, record)
    written = finished - failures - skipped
    print(f"{written} runs written to {args.csv}, {skipped} skipped, {failures} failed", flush=True)
    return 1 if failures else 0


def _run_pool(todo: list[dict[str, Any]], jobs: int, record: Callable[..., None]) -> None:
    """Run ``todo`` in ``jobs`` spawned processes, a fresh one per run; ``record`` each result as it comes."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    kwargs = {"max_tasks_per_child": 1} if sys.version_info >= (3, 11) else {}  # a fresh process per run
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context, **kwargs) as pool:
        futures = {pool.submit(run_job, job): job for job in todo}
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
    if args.only:  # one comparison: these variants' runs (without a tag) of --tasks at --frames
        keep = {a.strip() for a in args.only.split(",")}
        rows = [r for r in rows if r["algo"] in keep and not r["tag"] and r["task"] in args.tasks]
        rows = [r for r in rows if args.frames is None or int(r["frames"]) == args.frames]
    if not rows:
        print(f"learning_study: no runs in {args.csv}", file=sys.stderr)
        return 1
    # one table per (task, frames, num_envs), MaMuJoCo's per (task, frames) (its variants' envs differ); a variant
    # run with several configs (tags) gets one line each
    groups: dict[tuple[str, int, int], dict[tuple[str, str, str], list[dict[str, str]]]] = {}
    for row in rows:
        envs = 0 if is_mamujoco(row["task"]) else int(row["num_envs"])
        group = groups.setdefault((row["task"], int(row["frames"]), envs), {})
        group.setdefault((row["algo"], row["tag"], row["config_hash"]), []).append(row)
    budgets_per_task: dict[str, int] = {}
    for task, _, _ in groups:
        budgets_per_task[task] = budgets_per_task.get(task, 0) + 1

    for (task, frames, num_envs), lines in sorted(groups.items()):
        order = {name: i for i, name in enumerate(variants_for(task))}
        keys = sorted(lines, key=lambda k: (order.get(k[0], len(order)), k[0], k[1], k[2]))
        if is_mamujoco(task):
            name = f"learning_{_slug(task)}" + (f"_{frames}" if budgets_per_task[task] > 1 else "") + ".png"
            report_mamujoco(task, frames, lines, keys, path=os.path.join(args.images_dir, name))
            continue
        labels = _labels(keys)
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
        if args.data:  # the table as docs/results/make_tables.py reads it (the last group's; with --only, one group)
            from isaaclab_pendulum_learning import write_data

            lines_of = [dict(zip(header, line, strict=True)) for line in table]
            write_data(args.data, _data_meta(args, rows, task, frames, num_envs), header, lines_of)
        print(
            "\nfinal/first return: mean episode return per agent over the last/first 10% of a run's finished "
            "episodes, mean over seeds; 95% CI: Student's t over seeds; no learning: the seeds whose return rose by "
            f"less than {LEARNED_FRACTION:.0%} of the table's median rise; frames to reach: first bin of the mean "
            f"learning curve ({bins} bins of {_frames(frames / bins)} frames) at or above the target."
        )
        name = f"learning_{_slug(task)}" + (f"_{frames}" if budgets_per_task[task] > 1 else "") + ".png"
        if args.data:  # the data file's own plot, named after it
            name = os.path.splitext(os.path.basename(args.data))[0] + ".png"
        path = os.path.join(args.images_dir, name)
        plot_group(curves, labels, path=path, title=f"{task}, {num_envs} envs x {timesteps} steps", target=target)
        print(f"\nplot: {path}")
    return 0


def _data_meta(args: argparse.Namespace, rows: list[dict], task: str, frames: int, num_envs: int) -> dict:
    """The ``# key: value`` lines of a ``--data`` file: the study's and the report's commands, machine, dates, note."""
    from isaaclab_pendulum_learning import machine

    dates, codes = sorted(r["date"] for r in rows), sorted({r["code"] for r in rows})
    only = f" --only {args.only}" if args.only else ""
    frames_arg = f" --frames {args.frames}" if args.frames else ""
    seeds: dict[str, list[int]] = {}  # the study's commands: the variants run over the same seeds in one
    for row in rows:
        seeds.setdefault(row["algo"], []).append(int(row["seed"]))
    by_seeds: dict[str, list[str]] = {}
    for algo, done in seeds.items():
        low, high = min(done), max(done)
        by_seeds.setdefault(
            f"{low}-{high}" if sorted(done) == list(range(low, high + 1)) else ",".join(map(str, sorted(done))), []
        ).append(algo)
    studies = [
        f"python benchmarks/learning_study.py --tasks {task} --algos {','.join(algos)} --seeds {text}{frames_arg}"
        for text, algos in by_seeds.items()
    ]
    return {
        "command": [
            *studies,
            f"python benchmarks/learning_study.py --report --tasks {task}{only}{frames_arg} --data {args.data}",
        ],
        "machine": [machine()],
        "date": [f"{dates[0][:10]} to {dates[-1][:10]} (code {', '.join(codes)})"],
        "note": [
            f"{task}, {num_envs} envs x {frames // num_envs} steps per run; final/first return: mean episode return "
            "per agent over the last/first 10% of a run's finished episodes, mean over seeds; 95% CI: Student's t "
            "over seeds; rows per run in benchmarks/results/learning_study.csv"
        ],
    }


def _labels(keys: list[tuple[str, str, str]]) -> dict[tuple[str, str, str], str]:
    """``algo [tag]``, with the config hash where one (algo, tag) was run with several configs."""
    labels = {}
    for algo, tag, digest in keys:
        label = algo + (f" [{tag}]" if tag else "")
        if sum(1 for a, t, _ in keys if (a, t) == (algo, tag)) > 1:
            label += f" ({digest})"
        labels[(algo, tag, digest)] = label
    return labels


def report_mamujoco(task: str, frames: int, lines: dict, keys: list[tuple[str, str, str]], *, path: str) -> None:
    """A MaMuJoCo task's table (deterministic evaluation and training returns, 95% intervals over seeds) and plot
    (training curves, evaluation points)."""
    from bench_common import markdown_table, welch_test

    labels = _labels(keys)
    evaluated = [key for key in keys if all(r.get("eval_curve") for r in lines[key])]
    curves = {key: mean_curve(lines[key]) for key in keys}
    eval_curves = {key: mean_curve([{"curve": r["eval_curve"]} for r in lines[key]]) for key in evaluated}
    reference = [key for key in evaluated if key[0] == MAMUJOCO_REFERENCE]
    target = interval([float(r["eval_return"]) for r in lines[reference[0]]])[0] if reference else None
    table = []
    for key in keys:
        runs = sorted(lines[key], key=lambda r: int(r["seed"]))
        evals = [float(r["eval_return"]) for r in runs] if key in evaluated else []
        mean, low, high = interval(evals) if evals else (float("nan"),) * 3
        train, train_low, train_high = interval([float(r["final_return"]) for r in runs])
        seconds = sum(float(r["wall_seconds"]) for r in runs) / len(runs)
        cpu = sum(float(r.get("cpu_seconds") or "nan") for r in runs) / len(runs)
        table.append(
            [
                labels[key],
                len(runs),
                runs[0]["num_envs"],
                _fmt(mean, 0),
                f"[{_fmt(low, 0)}, {_fmt(high, 0)}]",
                " ".join(f"{v:.0f}" for v in evals) or "-",
                _fmt(train, 0),
                f"[{_fmt(train_low, 0)}, {_fmt(train_high, 0)}]",
                "-" if target is None or key not in evaluated else frames_to_reach(eval_curves[key], target),
                f"{seconds:.0f}",
                _fmt(cpu * 1e6 / frames / 60, 1),
            ]
        )
    first = json.loads(lines[evaluated[0]][0]["eval_curve"]) if evaluated else {"frames": [], "episodes": 0}
    points, episodes = len(first["frames"]), first["episodes"]
    print(f"\n### {task}: {frames:,} frames per run\n")
    reach = (
        f"frames to reach {MAMUJOCO_REFERENCE}'s eval mean ({_fmt(target, 0)})"
        if target is not None
        else "frames to reach"
    )
    header = [
        "algo",
        "n",
        "envs",
        "eval return",
        "95% CI",
        "per seed",
        "train return",
        "95% CI",
        reach,
        "train s/run",
        "CPU min/1M frames",
    ]
    print(markdown_table(header, table))
    print(
        f"\neval return: mean return per agent (the team's reward, as HARL reports it) of {episodes} episodes (one in "
        "each of the run's evaluation envs) with the policies' mean actions at the end of training, mean over seeds; "
        "train return: "
        "the same over the last 10% of the training episodes (sampled actions); 95% CI: Student's t over seeds; frames "
        f"to reach: first of the {points} evaluation points of the mean evaluation curve at or above the target; train "
        "s/run: wall time of the training loop without the evaluations; CPU min/1M frames: its CPU time per million "
        "frames (one torch thread; not inflated by other processes on the machine)."
    )
    tested = [key for key in evaluated if key[0] == "happo"]
    if tested:
        happo = [float(r["eval_return"]) for r in lines[tested[0]]]
        tests = []
        for key in evaluated:
            others = [float(r["eval_return"]) for r in lines[key]]
            if key != tested[0] and min(len(happo), len(others)) >= 2:
                t, df, p = welch_test(happo, others)
                tests.append(f"{labels[key]} t = {t:.2f}, df = {df:.1f}, p = {p:.2f}")
        if tests:
            print(f"\nhappo's eval return against each (Welch's t-test over seeds, two-sided): {'; '.join(tests)}.")
    resumed = [
        f"{labels[key]} seed {r['seed']} at {', '.join(_frames(f) for f in json.loads(r['curve'])['resumed_at_frames'])}"
        for key in keys
        for r in sorted(lines[key], key=lambda r: int(r["seed"]))
        if "resumed_at_frames" in json.loads(r["curve"])
    ]
    if resumed:
        print(f"\nresumed after a kill (new episodes from there): {'; '.join(resumed)}.")
    plot_group(
        curves,
        labels,
        path=path,
        title=f"{task}, {frames:,} frames per run",
        target=target,
        eval_curves=eval_curves,
        reference=MAMUJOCO_REFERENCE,
    )
    print(f"\nplot: {path}")


def plot_group(
    curves,
    labels,
    *,
    path: str,
    title: str,
    target: float | None,
    eval_curves: dict | None = None,
    reference: str = REFERENCE,
) -> None:
    """Mean training curve per line, a band from the min to the max over seeds; with ``eval_curves``, the mean
    evaluation returns as dashed lines with markers in the line's colour, and ``target`` as the reference's final
    evaluation mean."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig, ax = plt.subplots(figsize=(7.0, 4.4))
    for key, (xs, mean, low, high) in curves.items():
        (line,) = ax.plot(xs, mean, linewidth=1.8, label=labels[key])
        ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.15, linewidth=0)
        if eval_curves and key in eval_curves:
            ex, emean = eval_curves[key][:2]
            ax.plot(ex, emean, color=line.get_color(), linestyle="--", marker=".", linewidth=1.0)
    if target is not None:
        final = "final eval mean" if eval_curves else "final mean"
        ax.axhline(target, color="gray", linestyle=":", linewidth=1.0, label=f"{reference} {final}")
    ax.set_xlabel("env frames (steps x envs)")
    ax.set_ylabel("episode return per agent")
    subtitle = "mean over seeds, band: min-max over seeds" + (
        "; dashed: deterministic evaluation" if eval_curves else ""
    )
    ax.set_title(f"{title}\n{subtitle}", fontsize=10)
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
        epilog="Variants: "
        + "; ".join(f"{name}: {v.note}" for name, v in VARIANTS.items())
        + ". On MaMuJoCo tasks: "
        + "; ".join(f"{name}: {v.note}" for name, v in MAMUJOCO_VARIANTS.items()),
    )
    parser.add_argument(
        "--tasks", default=TASKS[0], help=f"comma-separated env specs, e.g. {','.join(TASKS + MAMUJOCO_TASKS)}"
    )
    parser.add_argument(
        "--algos",
        default=None,
        help=f"comma-separated of {','.join(VARIANTS)}; on MaMuJoCo tasks of {','.join(MAMUJOCO_VARIANTS)} "
        f"(default: {','.join(DEFAULT_ALGOS)}; on MaMuJoCo {','.join(MAMUJOCO_ALGOS)})",
    )
    parser.add_argument("--seeds", default="0", help="comma-separated seeds, or a range such as 0-4")
    parser.add_argument("--num-envs", type=int, default=128, help="envs stepped as one batch")
    parser.add_argument("--timesteps", type=int, default=4000, help="env steps per run (frames = steps x envs)")
    parser.add_argument("--frames", type=int, default=None, help="env frames per run (overrides --timesteps)")
    parser.add_argument("--device", default="cpu", help="torch device of env and agent")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run (0: torch's default)")
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (one process each)")
    parser.add_argument("--bins", type=int, default=20, help="bins of the stored learning curve")
    parser.add_argument("--tag", default="", help="free text stored with the runs and part of the config hash")
    parser.add_argument(
        "--eval-episodes",
        type=int,
        default=EVAL_EPISODES,
        help="MaMuJoCo tasks: deterministic episodes per evaluation point (one per evaluation env); 0: none",
    )
    parser.add_argument(
        "--eval-points", type=int, default=EVAL_POINTS, help="MaMuJoCo tasks: evaluations per run, the last at its end"
    )
    parser.add_argument(
        "--csv",
        default=None,
        help="results file (appended to; read by --report) (default: benchmarks/results/learning_study.csv; for "
        "MaMuJoCo tasks learning_mamujoco.csv beside it)",
    )
    parser.add_argument(
        "--work-dir",
        default=None,
        help="where each run holds a lock while it trains and a run with evaluation keeps its state, a killed study "
        "going on from it (default: runs/ beside --csv, which git ignores)",
    )
    parser.add_argument("--in-process", action="store_true", help="run in this process, one after another (debug)")
    parser.add_argument("--report", action="store_true", help="no training: tables and plots from --csv")
    parser.add_argument("--images-dir", default=DEFAULT_IMAGES, help="where --report writes learning_<task>.png")
    parser.add_argument("--only", default="", help="--report: only these variants (comma-separated) of --tasks")
    parser.add_argument(
        "--data", default="", help="--report: also write the table to this data file, its plot named after it"
    )
    args = parser.parse_args(argv)
    args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    mamujoco = {is_mamujoco(task) for task in args.tasks}
    if args.csv is None:
        if len(mamujoco) > 1:
            parser.error("MaMuJoCo tasks and others write different CSVs: run them apart, or give --csv")
        args.csv = MAMUJOCO_CSV if mamujoco == {True} else DEFAULT_CSV
    if args.work_dir is None:
        args.work_dir = os.path.join(os.path.dirname(os.path.abspath(args.csv)), "runs")
    if args.algos is None:
        args.algos = ",".join(MAMUJOCO_ALGOS if mamujoco == {True} else DEFAULT_ALGOS)
    args.algos = [a.strip() for a in args.algos.split(",") if a.strip()]
    for task in args.tasks:
        variants = variants_for(task)
        unknown = [a for a in args.algos if a not in variants]
        if unknown:
            parser.error(f"unknown --algos {unknown} for {task}; choose from {', '.join(variants)}")
    seeds = []
    for part in args.seeds.split(","):
        low, sep, high = part.strip().partition("-")
        seeds += list(range(int(low), int(high) + 1)) if sep else [int(low)]
    args.seeds = seeds
    if args.num_envs < 1 or args.timesteps < 1 or (args.frames is not None and args.frames < 1) or args.jobs < 1:
        parser.error("--num-envs, --timesteps, --frames and --jobs must be positive")
    if args.bins < 1:
        parser.error("--bins must be positive")
    if args.eval_episodes < 0 or args.eval_points < 1:
        parser.error("--eval-episodes must be 0 or more, --eval-points positive")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    return report(args) if args.report else study(args)


if __name__ == "__main__":
    sys.exit(main())
