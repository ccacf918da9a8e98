"""``train --resume RUN_DIR``: where a run goes on from (its newest checkpoint) and with which config (its own)."""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
from typing import Any

from skrl_marl_ext import distributed
from skrl_marl_ext.cli.config import parse_env_args
from skrl_marl_ext.cli.errors import UsageError
from skrl_marl_ext.cli.parser import given
from skrl_marl_ext.cli.run_folder import FINAL_CHECKPOINT, RUN_FILE

RESUME_CONFLICTS = {
    "algo": "--algo",
    "env": "--env",
    "env_arg": "--env-arg",
    "num_envs": "--num-envs",
    "timesteps": "--timesteps",
    "seed": "--seed",
    "config": "--config",
    "shared_policy": "--shared-policy",
    "rnn": "--rnn",
    "sequence_length": "--sequence-length",
    "out": "--out",
    "overrides": "SECTION.KEY=VALUE overrides",
}
"""``train`` options that the run's ``run.json`` fixes (argparse name -> as typed): given with ``--resume`` they must
agree with the run's."""


def resume_point(args: argparse.Namespace) -> tuple[dict[str, Any], str, str, int]:
    """``(run.json, run_dir, checkpoint, steps it completed)`` of ``--resume RUN_DIR``: the newest checkpoint is
    ``checkpoints/agent_<T>.pt`` with the largest ``T``, or ``final.pt`` when it holds more steps.

    :raises UsageError: When ``RUN_DIR`` is not a run of ``train``, has no checkpoint, has run all its steps, or an
        option given with ``--resume`` disagrees with the run's own (naming the option).
    """
    run_dir = os.path.abspath(args.resume)
    run_file = os.path.join(run_dir, RUN_FILE)
    if not os.path.isfile(run_file):
        raise UsageError(f"--resume {args.resume}: expected a run directory of 'skrl-marl train' (with {RUN_FILE})")
    with open(run_file) as file:
        run = json.load(file)
    _check_options(args, run)
    done, checkpoint = _newest_checkpoint(run_dir, args.resume)
    if done >= run["timesteps"]:
        raise UsageError(
            f"--resume {args.resume}: the run has completed its {run['timesteps']} steps ({checkpoint}); nothing to "
            "resume (start a new run to train longer)"
        )
    return run, run_dir, checkpoint, done


def _check_options(args: argparse.Namespace, run: dict[str, Any]) -> None:
    """Raise :class:`UsageError` on the first option (by name) given with ``--resume`` that the run fixes otherwise."""
    own = {
        "algo": run["algo"],
        "env": run["env"],
        "env_arg": run["env_kwargs"],
        "num_envs": run["num_envs"],
        "timesteps": run["timesteps"],
        "seed": run["seed"],
        "overrides": run["overrides"],
    }
    for name in sorted(given(args) & set(RESUME_CONFLICTS)):
        value = getattr(args, name)
        if name == "env_arg":
            value = parse_env_args(value)
        if name == "algo" and isinstance(value, str):
            value = value.lower()
        if name not in own or value != own[name]:
            theirs = f" (the run's: {own[name]!r})" if name in own else ""
            raise UsageError(
                f"{RESUME_CONFLICTS[name]} {value!r} disagrees with the run being resumed{theirs}: --resume continues "
                f"the run with its own configuration from {RUN_FILE}; leave {RESUME_CONFLICTS[name]} out"
            )


def _newest_checkpoint(run_dir: str, resume: str) -> tuple[int, str]:
    """``(steps completed, path)`` of the run's checkpoint with the most steps (``resume`` as typed, for the error)."""
    checkpoints = os.path.join(run_dir, "checkpoints")
    found = []
    for name in os.listdir(checkpoints) if os.path.isdir(checkpoints) else []:
        match = re.fullmatch(r"agent_(\d+)\.pt", name)
        if match:
            found.append((int(match[1]), os.path.join(checkpoints, name)))
    final = os.path.join(checkpoints, FINAL_CHECKPOINT)
    if os.path.isfile(final):
        found.append((_steps_completed(final), final))
    if not found:
        raise UsageError(f"--resume {resume}: no checkpoint in {checkpoints} to resume from")
    return max(found)


def _steps_completed(path: str) -> int:
    """The steps a checkpoint of ours had completed (its ``progress``; 0 for a file without it)."""
    from skrl_marl_ext.checkpoint import read_checkpoint

    try:
        modules = read_checkpoint(path, map_location="cpu", owner="--resume")
    except ValueError as e:
        raise UsageError(str(e)) from None
    progress = [m.get("progress") for m in modules.values() if isinstance(m, dict)] if isinstance(modules, dict) else []
    return max((int(p.get("timestep", 0)) for p in progress if isinstance(p, dict)), default=0)


def resumed_config(
    cfg: dict[str, Any], args: argparse.Namespace, *, run_dir: str, steps: int, seed: int
) -> dict[str, Any]:
    """The run's Runner config writing into ``run_dir`` (checkpoints and TensorBoard), for ``steps`` more steps, with
    the run's ``seed`` (``seed + rank``)."""
    cfg = copy.deepcopy(cfg)
    cfg["seed"] = seed + distributed.rank()
    experiment = cfg["agent"].get("experiment") or {}
    experiment.update({"directory": os.path.dirname(run_dir), "experiment_name": os.path.basename(run_dir)})
    cfg["agent"]["experiment"] = experiment
    cfg["trainer"] = {**(cfg.get("trainer") or {}), "timesteps": steps}
    cfg["trainer"]["disable_progressbar"] = bool(args.no_progress) or distributed.rank() > 0
    return cfg
