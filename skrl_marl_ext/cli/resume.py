"""``train --resume RUN_DIR``: where a run goes on from (the checkpoint its ``run.json`` records, or the one ``--from``
names), for how long (its own steps, or ``--timesteps``) and with which config (its own)."""

from __future__ import annotations

import argparse
import copy
import os
from typing import Any

from skrl_marl_ext import distributed
from skrl_marl_ext.cli.config import parse_env_args
from skrl_marl_ext.cli.errors import UsageError
from skrl_marl_ext.cli.parser import given
from skrl_marl_ext.cli.run_folder import (
    RUN_FILE,
    checkpoint_step,
    latest_checkpoint,
    plot_due,
    read_run_file,
    read_steps,
)

RESUME_CONFLICTS = {
    "algo": "--algo",
    "env": "--env",
    "env_arg": "--env-arg",
    "num_envs": "--num-envs",
    "seed": "--seed",
    "config": "--config",
    "shared_policy": "--shared-policy",
    "rnn": "--rnn",
    "sequence_length": "--sequence-length",
    "out": "--out",
    "overrides": "SECTION.KEY=VALUE overrides",
}
"""``train`` options that the run's ``run.json`` fixes (argparse name -> as typed): given with ``--resume`` they must
agree with the run's. (``--timesteps`` is not one: with ``--resume`` it sets the run's new length.)"""


def resume_folder(resume: str) -> str:
    """The run folder of ``--resume PATH``: ``PATH`` itself, or the run holding ``PATH`` when it is a checkpoint
    (``RUN/checkpoints/agent_<T>.pt``).

    :raises UsageError: When ``PATH`` does not exist.
    """
    path = os.path.abspath(resume)
    if not os.path.exists(path):
        raise UsageError(f"--resume {resume}: {path} does not exist")
    return path if os.path.isdir(path) else os.path.dirname(os.path.dirname(path))


def resume_point(args: argparse.Namespace, run_dir: str) -> tuple[dict[str, Any], str, int, int]:
    """``(run.json, checkpoint, steps it completed, steps of the run)`` of ``--resume`` into ``run_dir``.

    The checkpoint is the one ``--from`` names (a path or a step), the one ``--resume`` names when it is a file, else
    the one the run's ``run.json`` records (:func:`~skrl_marl_ext.cli.run_folder.latest_checkpoint`, which falls back
    by step past damaged files). The run's steps are ``--timesteps`` where given (a finished run trains on to it), else
    its own. A finished run whose learning curve is due (:func:`~skrl_marl_ext.cli.run_folder.plot_due`) comes back
    with no steps to run: the caller makes the plot.

    :raises UsageError: When ``run_dir`` is not a run of ``train``, the checkpoint is missing or damaged, the run has
        run all its steps, or an option given with ``--resume`` disagrees with the run's own (naming the option).
    """
    option = f"--resume {args.resume}"
    run = read_run_file(run_dir, option=option)
    _check_options(args, run)
    named = getattr(args, "start_from", None) or (None if os.path.isdir(os.path.abspath(args.resume)) else args.resume)
    if named is None:
        done, checkpoint = latest_checkpoint(run_dir, run, option=option)
    else:
        checkpoint = _named_checkpoint(run_dir, named, option=option if args.resume == named else f"--from {named}")
        try:
            done = read_steps(checkpoint, option=f"--from {named}")
        except ValueError as e:
            raise UsageError(str(e)) from None
    timesteps = args.timesteps if "timesteps" in given(args) else run["timesteps"]
    if done >= timesteps and timesteps == run["timesteps"] and plot_due(run, run_dir):
        return run, checkpoint, done, done
    if done >= timesteps:
        what = "has completed its" if timesteps == run["timesteps"] else "is past"
        raise UsageError(
            f"{option}: the run {what} {timesteps} steps ({checkpoint} holds {done}); nothing to resume: pass "
            f"--timesteps N with N > {done} to train it further"
        )
    return run, checkpoint, done, timesteps


def _named_checkpoint(run_dir: str, named: str, *, option: str) -> str:
    """The checkpoint ``--from`` names: a path, or a step (``checkpoints/agent_<step>.pt``)."""
    if named.isdigit():
        path = os.path.join(run_dir, "checkpoints", f"agent_{int(named)}.pt")
        if not os.path.isfile(path):
            steps = sorted(s for s in map(checkpoint_step, _checkpoint_names(run_dir)) if s is not None)
            have = f"{len(steps)} from step {steps[0]} to {steps[-1]}" if steps else "none"
            raise UsageError(f"{option}: the run has no checkpoint of step {named} (it has {have}); give a step it has")
        return path
    path = os.path.abspath(named)
    if not os.path.isfile(path):
        raise UsageError(f"{option}: {path} does not exist (give a checkpoint file or a step number)")
    return path


def _checkpoint_names(run_dir: str) -> list[str]:
    folder = os.path.join(run_dir, "checkpoints")
    return os.listdir(folder) if os.path.isdir(folder) else []


def _check_options(args: argparse.Namespace, run: dict[str, Any]) -> None:
    """Raise :class:`UsageError` on the first option (by name) given with ``--resume`` that the run fixes otherwise."""
    own = {
        "algo": run["algo"],
        "env": run["env"],
        "env_arg": run["env_kwargs"],
        "num_envs": run["num_envs"],
        "seed": run.get("seed"),
        "overrides": run.get("overrides"),
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
