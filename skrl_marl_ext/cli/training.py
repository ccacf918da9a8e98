"""``skrl-marl train``: a new run or ``--resume`` of one, trained with skrl's trainer, and its ``torchrun`` set-up.

Under ``torchrun`` (``WORLD_SIZE > 1``) :func:`setup_torchrun` creates the process group before skrl is imported
(gloo on CPU; NCCL on CUDA, each rank on ``cuda:LOCAL_RANK``); rank ``r`` is seeded with ``seed + r``, rank 0 alone
writes the run folder and prints the summary, and every rank checks at the end that all hold the same parameters.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import shutil
import time
from typing import Any

import torch

from skrl_marl_ext import distributed
from skrl_marl_ext.checkpoints.files import remove_temporary_files
from skrl_marl_ext.cli.build import build_env, build_runner, check_device
from skrl_marl_ext.cli.config import parse_env_args, runner_config, train_config
from skrl_marl_ext.cli.episodes import EpisodeLog, run_episode_stats
from skrl_marl_ext.cli.errors import RanksDisagree, Stopped, UsageError
from skrl_marl_ext.cli.loop import StopRequest, stop_on_signals, tensorboard_failures, train_steps
from skrl_marl_ext.cli.parser import given
from skrl_marl_ext.cli.resume import resume_folder, resume_point, resumed_config
from skrl_marl_ext.cli.run_folder import (
    FINAL_CHECKPOINT,
    RUN_FILE,
    RunLock,
    create_run_folder,
    run_name,
    set_aside_later_checkpoints,
    train_summary,
    write_plot,
    write_run,
    write_run_file,
)


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
    total: int
    """The run's steps, to which this call trains."""
    checkpoint: str | None = None
    """The checkpoint that ``--resume`` starts from (None for a new run)."""
    done: int = 0
    """Steps that checkpoint had completed."""


def train(args: argparse.Namespace) -> dict[str, Any]:
    """``skrl-marl train``: returns the paths written (also printed as a short summary, by rank 0).

    With ``--resume RUN_DIR`` the run in ``RUN_DIR`` goes on from its latest intact checkpoint (see
    :func:`~skrl_marl_ext.cli.resume.resume_point`). One process at a time trains into a run folder (its lock is held
    until the call returns); ``run.json`` is written before the first step and at each checkpoint.

    :raises Stopped: When SIGINT or SIGTERM ended the run early (after a checkpoint was written).
    :raises RanksDisagree: When the ranks of a distributed run end with different parameters.
    """
    rank, world = distributed.rank(), distributed.world_size()
    # a signal reaches every rank of a distributed run at its own step: there the default handling stays
    signals = stop_on_signals() if world == 1 else contextlib.nullcontext(StopRequest())
    with signals as stop, contextlib.ExitStack() as held:
        plan = _resumed_plan(args, held) if args.resume else _new_plan(args, held)
        if plan.done >= plan.total:  # a finished run whose learning curve is due (its write failed): the plot alone
            result = {"run_dir": plan.run_dir, "ranks": world, "ranks_agree": True}
            if rank == 0:
                episodes = run_episode_stats(plan.run_dir, num_envs=plan.run["num_envs"])
                result["plot"] = plot = write_plot(plan.run, plan.run_dir, episodes)
                print(f"skrl-marl: the run has completed its {plan.total} steps; wrote its learning curve: {plot}")
            return result
        run, env_device = plan.run, distributed.torchrun_device(plan.device)
        record = _RunRecord(plan, writes=rank == 0)
        held.callback(record.close)
        env = build_env(
            run["env"],
            num_envs=run["num_envs"],
            device=env_device,
            seed=plan.cfg["seed"],
            env_kwargs=run["env_kwargs"],
            on_episodes=record.add_episodes,
        )
        held.enter_context(tensorboard_failures(plan.run_dir))  # from the writer's first event on
        runner = build_runner(env, plan.cfg)
        agent = runner.agent
        if plan.checkpoint is not None:
            try:
                agent.load(plan.checkpoint)
            except ValueError as e:
                raise UsageError(f"--resume {args.resume}: {e}") from None
            if rank == 0:  # the run goes on: what it would write again of later steps is kept aside
                set_aside_later_checkpoints(plan.run_dir, plan.done, plan.checkpoint, option=f"--resume {args.resume}")
        record.started(env.possible_agents)

        start = time.perf_counter()
        reached = train_steps(
            agent,
            env,
            runner.trainer.cfg,
            first=plan.done,
            total=plan.total,
            stop=stop,
            on_checkpoint=lambda step: record.checkpointed(step, agent.last_checkpoint[1], time.perf_counter() - start),
        )
        seconds = time.perf_counter() - start
        if stop.signal is not None and reached < plan.total:  # a signal during the last step lets the run finish
            raise record.stopped(agent, reached, seconds, signal_name=stop.name, signal_number=stop.signal)

        checksums = distributed.gather_checksums(_unique_models(agent))  # every rank takes part
        agree = bool((checksums == checksums[0]).all())
        result = {"run_dir": plan.run_dir, "ranks": world, "ranks_agree": agree}
        if rank == 0:
            record.finished(agent, result, seconds=seconds, checksums=checksums)
    if not agree:
        raise RanksDisagree(f"the {world} ranks ended with different parameters")
    return result


def _new_plan(args: argparse.Namespace, held: contextlib.ExitStack) -> _Plan:
    """A new run in a new folder of ``--out`` (rank 0 creates it and holds its lock), from the options, the config
    and its overrides."""
    if getattr(args, "start_from", None) is not None:
        raise UsageError("--from names the checkpoint of a --resume; give --resume RUN_DIR too")
    algo, cfg, timesteps = train_config(args)
    run = {"algo": algo, "env": args.env, "env_kwargs": parse_env_args(args.env_arg), "num_envs": args.num_envs}
    run_dir = None
    if distributed.rank() == 0:
        new_out = not os.path.isdir(args.out)
        run_dir = create_run_folder(args.out, run_name(algo, args.env))
        held.enter_context(RunLock(run_dir, option=f"--out {args.out}"))
        held.callback(_remove_unstarted, run_dir, out=args.out if new_out else None)
        held.callback(_remove_temporary_files, run_dir)
    run_dir = distributed.broadcast_object(run_dir)
    cfg = runner_config(cfg, args, run_name=os.path.basename(run_dir), timesteps=timesteps)
    run.update(
        device=args.device,
        seed=args.seed,
        timesteps=timesteps,
        ranks=distributed.world_size(),
        overrides=list(args.overrides),
        config=cfg,
    )
    return _Plan(run, run_dir, cfg, device=args.device, total=timesteps)


def _remove_unstarted(run_dir: str, *, out: str | None) -> None:
    """Remove the folder of a new run that failed before its first step (it has no ``run.json``), and ``out`` when
    this run created it and it is left empty."""
    if not os.path.isfile(os.path.join(run_dir, RUN_FILE)):
        shutil.rmtree(run_dir, ignore_errors=True)
        if out is not None and os.path.isdir(out) and not os.listdir(out):
            os.rmdir(out)


def _resumed_plan(args: argparse.Namespace, held: contextlib.ExitStack) -> _Plan:
    """The run of ``--resume`` (its lock held by rank 0), from its checkpoint to its steps (or ``--timesteps``), on
    its own device unless ``--device`` is given."""
    run_dir, option = resume_folder(args.resume), f"--resume {args.resume}"
    if distributed.rank() == 0:
        held.enter_context(RunLock(run_dir, option=option))
        _remove_temporary_files(run_dir)
        held.callback(_remove_temporary_files, run_dir)  # and those of a kill just before this call, stale by then
    run, checkpoint, done, total = resume_point(args, run_dir)
    cfg = resumed_config(run["config"], args, run_dir=run_dir, steps=total - done, seed=run["seed"])
    device = args.device if "device" in given(args) else run["device"]
    run["timesteps"] = total
    run.setdefault("resumed", []).append({"from_step": done, "checkpoint": checkpoint, "device": device})
    return _Plan(run, run_dir, cfg, device=device, total=total, checkpoint=checkpoint, done=done)


def _remove_temporary_files(run_dir: str) -> None:
    """Remove the temporary files that writes killed mid-way left in the run folder and its ``checkpoints/`` (none that
    a live write holds, see :func:`~skrl_marl_ext.checkpoints.files.remove_temporary_files`)."""
    remove_temporary_files(run_dir)
    remove_temporary_files(os.path.join(run_dir, "checkpoints"))


def _unique_models(agent) -> list[torch.nn.Module]:
    """The agent's models, each once (shared models stand in several agents' dicts), in agent and role order."""
    models = {id(m): m for uid in agent.possible_agents for m in agent.models[uid].values() if m is not None}
    return list(models.values())


class _RunRecord:
    """The run folder kept current as the run goes (by rank 0 alone: ``writes``): ``run.json`` before the first step,
    at each checkpoint and at a stop; ``episodes.csv`` as episodes end (synced with ``run.json``); the final
    checkpoint, plot and summary line at the end."""

    def __init__(self, plan: _Plan, *, writes: bool) -> None:
        self.plan, self.writes = plan, writes
        self.seconds_before = float(plan.run.get("train_seconds", 0.0))
        self.episodes: EpisodeLog | None = None

    def add_episodes(self, step: int, returns: list[list[float]]) -> None:
        """The recorder's hook: episodes that ended at this call's ``step`` (the run's ``plan.done + step``)."""
        if self.episodes is not None:
            self.episodes.add(self.plan.done + step, returns)

    def _write(self, *, status: str, step: int, checkpoint: str | None, seconds: float) -> None:
        if not self.writes:
            return
        run = self.plan.run
        run.update(
            status=status, step=step, checkpoint=checkpoint, train_seconds=round(self.seconds_before + seconds, 2)
        )
        if self.episodes is not None:
            self.episodes.sync()
        write_run_file(self.plan.run_dir, run)

    def started(self, agents: list[str]) -> None:
        """Start ``episodes.csv`` (a resumed run's keeps its rows up to the checkpoint's step) and write ``run.json``."""
        if self.writes:
            resume_step = self.plan.done if self.plan.checkpoint is not None else None
            self.episodes = EpisodeLog(
                self.plan.run_dir, agents, num_envs=self.plan.run["num_envs"], resume_step=resume_step
            )
        self._write(status="running", step=self.plan.done, checkpoint=self.plan.checkpoint, seconds=0.0)

    def close(self) -> None:
        """Close ``episodes.csv`` (its rows so far on disk), however the call ends."""
        if self.episodes is not None:
            self.episodes.close()

    def checkpointed(self, step: int, path: str, seconds: float) -> None:
        self._write(status="running", step=step, checkpoint=path, seconds=seconds)

    def stopped(self, agent, step: int, seconds: float, *, signal_name: str, signal_number: int) -> Stopped:
        """Write a checkpoint of ``step`` (unless the agent has just written it) and the run's record; return the
        :class:`Stopped` that ends the command (exit status ``128 + signal_number``)."""
        written = agent.last_checkpoint
        if step == self.plan.done and self.plan.checkpoint is not None:  # stopped before its first step
            path = self.plan.checkpoint
        else:
            if self.writes and (written is None or written[0] != step):
                done = self.plan.done  # the trainer's count, as the agent takes it
                agent.write_checkpoint(timestep=step - done, timesteps=self.plan.total - done)
            path = agent.last_checkpoint[1] if agent.last_checkpoint else None
        self._write(status="stopped", step=step, checkpoint=path, seconds=seconds)
        return Stopped(
            f"stopped by {signal_name} at step {step} of {self.plan.total}; checkpoint: {path}; go on with: "
            f"skrl-marl train --resume {self.plan.run_dir}",
            status=128 + signal_number,
        )

    def finished(self, agent, result: dict[str, Any], *, seconds: float, checksums: torch.Tensor) -> None:
        """Rank 0: write the final checkpoint, ``run.json``, ``episodes.csv`` and plot (their paths go into
        ``result``); print the summary."""
        plan, run, world = self.plan, self.plan.run, distributed.world_size()
        self.close()
        episodes = self.episodes.stats()
        final = os.path.join(plan.run_dir, "checkpoints", FINAL_CHECKPOINT)
        run.update(status="finished", step=plan.total, checkpoint=final)
        run["train_seconds"] = round(self.seconds_before + seconds, 2)
        result.update(write_run(agent, run, plan.run_dir, episodes))
        ranks = "" if world == 1 else f"\n  {world} ranks, parameters identical"
        if not result["ranks_agree"]:
            ranks = f"\n  {world} ranks, error: parameters differ across ranks (checksums {checksums.tolist()})"
        frames = (plan.total - plan.done) * run["num_envs"] * world
        summary = train_summary(run, result, episodes, frames=frames, seconds=seconds, resumed_from=plan.done)
        print(summary + ranks)
