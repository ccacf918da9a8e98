"""``skrl-marl train``: a new run or ``--resume`` of one, trained with skrl's trainer, and its ``torchrun`` set-up.

Under ``torchrun`` (``WORLD_SIZE > 1``) :func:`setup_torchrun` creates the process group before skrl is imported
(gloo on CPU; NCCL on CUDA, each rank on ``cuda:LOCAL_RANK``); rank ``r`` is seeded with ``seed + r``, rank 0 alone
writes the run folder and prints the summary, and every rank checks at the end that all hold the same parameters.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time
from typing import Any

import torch

from skrl_marl_ext import distributed
from skrl_marl_ext.cli.build import build_env, build_runner, check_device
from skrl_marl_ext.cli.config import parse_env_args, runner_config, train_config
from skrl_marl_ext.cli.errors import RanksDisagree, UsageError
from skrl_marl_ext.cli.parser import given
from skrl_marl_ext.cli.resume import resume_point, resumed_config
from skrl_marl_ext.cli.run_folder import Episodes, read_episodes, run_name, train_summary, write_run


def setup_torchrun(args: argparse.Namespace) -> bool:
    """Under torchrun (``WORLD_SIZE > 1``), create the process group before skrl is imported; return whether it was
    created here (then the caller destroys it)."""
    if distributed.torchrun_world_size() <= 1:
        return False
    if args.command != "train":
        raise UsageError(f"{args.command} runs in one process: run it without torchrun")
    check_device(args.device)
    index, local_rank = torch.device(args.device).index, distributed.torchrun_local_rank()
    if torch.device(args.device).type == "cuda" and index not in (None, local_rank):
        raise UsageError(
            f"--device {args.device}: under torchrun each process takes cuda:LOCAL_RANK; use --device cuda"
        )
    return distributed.init_torchrun_group(args.device)


@dataclasses.dataclass
class _Plan:
    """What one ``train`` call runs: a new run, or the rest of one that ``--resume`` continues."""

    run: dict[str, Any]
    """The run's ``run.json`` so far."""
    run_dir: str
    cfg: dict[str, Any]
    """The Runner config, as the options set it."""
    device: str
    """The device asked for (``cuda`` means ``cuda:LOCAL_RANK`` under torchrun)."""
    steps: int
    """Steps this call trains."""
    checkpoint: str | None = None
    """The checkpoint that ``--resume`` starts from (None for a new run)."""
    done: int = 0
    """Steps that checkpoint had completed."""


def train(args: argparse.Namespace) -> dict[str, Any]:
    """``skrl-marl train``: returns the paths written (also printed as one summary line, by rank 0).

    With ``--resume RUN_DIR`` the run in ``RUN_DIR`` goes on from its newest checkpoint (see
    :func:`~skrl_marl_ext.cli.resume.resume_point`).

    :raises RanksDisagree: When the ranks of a distributed run end with different parameters.
    """
    rank, world = distributed.rank(), distributed.world_size()
    plan = _resumed_plan(args) if args.resume else _new_plan(args)
    run, env_device = plan.run, distributed.torchrun_device(plan.device)
    env = build_env(
        run["env"], num_envs=run["num_envs"], device=env_device, seed=plan.cfg["seed"], env_kwargs=run["env_kwargs"]
    )
    runner = build_runner(env, plan.cfg)
    if plan.checkpoint is not None:
        try:
            runner.agent.load(plan.checkpoint)
        except ValueError as e:
            raise UsageError(f"--resume {args.resume}: {e}") from None

    start = time.perf_counter()
    runner.run("train")
    seconds = time.perf_counter() - start

    checksums = distributed.gather_checksums(_unique_models(runner.agent))  # every rank takes part
    agree = bool((checksums == checksums[0]).all())
    result = {"run_dir": plan.run_dir, "ranks": world, "ranks_agree": agree}
    if rank == 0:
        _write_results(runner.agent, env.episodes, plan, args, result, seconds=seconds, checksums=checksums)
    if not agree:
        raise RanksDisagree(f"the {world} ranks ended with different parameters")
    return result


def _new_plan(args: argparse.Namespace) -> _Plan:
    """A new run in ``--out``, from the options, the config and its overrides."""
    algo, cfg, timesteps = train_config(args)
    run = {"algo": algo, "env": args.env, "env_kwargs": parse_env_args(args.env_arg), "num_envs": args.num_envs}
    name = distributed.broadcast_object(run_name(algo, args.env))
    run_dir = os.path.abspath(os.path.join(args.out, name))
    cfg = runner_config(cfg, args, run_name=name, timesteps=timesteps)
    return _Plan(run, run_dir, cfg, device=args.device, steps=timesteps)


def _resumed_plan(args: argparse.Namespace) -> _Plan:
    """The run in ``--resume RUN_DIR``, for its remaining steps, on its own device unless ``--device`` is given."""
    run, run_dir, checkpoint, done = resume_point(args)
    steps = run["timesteps"] - done
    cfg = resumed_config(run["config"], args, run_dir=run_dir, steps=steps, seed=run["seed"])
    device = args.device if "device" in given(args) else run["device"]
    return _Plan(run, run_dir, cfg, device=device, steps=steps, checkpoint=checkpoint, done=done)


def _unique_models(agent) -> list[torch.nn.Module]:
    """The agent's models, each once (shared models stand in several agents' dicts), in agent and role order."""
    models = {id(m): m for uid in agent.possible_agents for m in agent.models[uid].values() if m is not None}
    return list(models.values())


def _write_results(
    agent,
    episodes: Episodes,
    plan: _Plan,
    args: argparse.Namespace,
    result: dict[str, Any],
    *,
    seconds: float,
    checksums: torch.Tensor,
) -> None:
    """Rank 0: complete ``run.json``, write the run folder (its paths go into ``result``), print the summary line."""
    run, world = plan.run, distributed.world_size()
    if plan.checkpoint is None:
        run.update(
            device=args.device,
            seed=args.seed,
            timesteps=plan.steps,
            ranks=world,
            overrides=list(args.overrides),
            train_seconds=round(seconds, 2),
            config=plan.cfg,
        )
    else:  # the episodes up to the checkpoint, then this part's (its steps counted from the checkpoint's)
        run["train_seconds"] = round(run.get("train_seconds", 0.0) + seconds, 2)
        run.setdefault("resumed", []).append(
            {"from_step": plan.done, "checkpoint": plan.checkpoint, "device": plan.device}
        )
        earlier = [(step, r) for step, r in read_episodes(plan.run_dir) if step <= plan.done]
        episodes = earlier + [(plan.done + step, r) for step, r in episodes]
    result.update(write_run(agent, run, plan.run_dir, episodes))
    ranks = "" if world == 1 else f"; {world} ranks, parameters identical"
    if not result["ranks_agree"]:
        ranks = f"; {world} ranks, error: parameters differ across ranks (checksums {checksums.tolist()})"
    frames = plan.steps * run["num_envs"] * world
    print(train_summary(run, result, episodes, frames=frames, seconds=seconds, resumed_from=plan.done) + ranks)
