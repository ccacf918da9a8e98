"""The training loop of ``skrl-marl train``: skrl's trainer loop, with the run's absolute step on the progress bar, a
hook at each checkpoint (the run folder is brought up to date there), a clean stop on Ctrl-C or SIGTERM, and
TensorBoard's failures (a full disk) as one line naming the folder.

Each step is :func:`skrl_marl_ext.trainers.interact`, the body of skrl's ``SequentialTrainer`` loop for one
multi-agent: the agent sees the calls, timesteps and env resets it would see under ``runner.run("train")``.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
import tqdm

from skrl_marl_ext.checkpoints.files import WriteError

STOP_SIGNALS = ("SIGINT", "SIGTERM")
"""Signals that end a run cleanly: the step under way finishes, a checkpoint is written, the command exits with
``128 + signal number`` (130 for Ctrl-C, 143 for SIGTERM)."""


class StopRequest:
    """The first stop signal received while :func:`stop_on_signals` is active (None while none came)."""

    def __init__(self) -> None:
        self.signal: int | None = None

    @property
    def name(self) -> str:
        return signal.Signals(self.signal).name if self.signal is not None else ""


@contextlib.contextmanager
def stop_on_signals() -> Iterator[StopRequest]:
    """Turn SIGINT and SIGTERM into a :class:`StopRequest` the loop reads after each step (a second Ctrl-C stops at
    once, with ``KeyboardInterrupt``); the previous handlers come back on exit. Outside the main thread (where Python
    cannot install handlers) nothing changes."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def handle(signum: int, frame: Any) -> None:
        if request.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        request.signal = request.signal or signum

    previous = {name: signal.signal(getattr(signal, name), handle) for name in STOP_SIGNALS}
    try:
        yield request
    finally:
        for name, handler in previous.items():
            signal.signal(getattr(signal, name), handler)


def _is_tensorboard_thread(thread: threading.Thread | None) -> bool:
    """Whether ``thread`` is one of TensorBoard's (the writer thread of an event file)."""
    return thread is not None and type(thread).__module__.startswith("tensorboard.")


@contextlib.contextmanager
def tensorboard_failures(folder: str) -> Iterator[None]:
    """A failed write of TensorBoard's events into ``folder`` (a full disk) ends the command with one
    :class:`WriteError` naming the folder and the ways out, not with TensorBoard's writer thread printing its
    traceback and the command a line naming no file.

    TensorBoard writes its events in a thread of its own; when a write fails the thread ends with the error (which
    Python would print) and the writer's next call raises that same error object: that is how it is told apart.
    """
    failed: list[BaseException] = []
    previous = threading.excepthook

    def hook(args: Any) -> None:
        if _is_tensorboard_thread(args.thread):  # raised again by the writer's next call, as one line
            failed.append(args.exc_value)
        else:
            previous(args)

    threading.excepthook = hook
    try:
        yield
    except OSError as e:
        if not _failed_in_tensorboard(e, failed):
            raise
        reason = e.strerror or " ".join(str(e).split()) or type(e).__name__
        failure = WriteError(
            f"cannot write TensorBoard's events into {folder}: {reason}; its checkpoints and run.json are intact: "
            f"free space there and go on with 'skrl-marl train --resume {folder}', or train with --out elsewhere, or "
            "without TensorBoard (agent.experiment.write_interval=0)"
        )
        failure.errno, failure.reason = e.errno, reason
        raise failure from e
    finally:
        for (
            thread
        ) in threading.enumerate():  # a writer thread that failed ends (its hook call too) before the hook goes
            if _is_tensorboard_thread(thread) and getattr(thread, "exception", None) is not None:
                thread.join(timeout=5.0)
        threading.excepthook = previous


def _failed_in_tensorboard(error: BaseException, failed: list[BaseException]) -> bool:
    """Whether ``error`` is the one a TensorBoard writer thread ended with (or is ending with)."""
    for thread in threading.enumerate():
        if _is_tensorboard_thread(thread) and getattr(thread, "exception", None) is error:
            return True
    return any(error is f for f in failed)


def train_steps(
    agent: Any,
    env: Any,
    trainer_cfg: Any,
    *,
    first: int,
    total: int,
    stop: StopRequest,
    on_checkpoint: Callable[[int], None],
) -> int:
    """Train ``agent`` from step ``first`` of the run to ``total`` (or until ``stop`` is requested); return the step
    reached.

    The trainer's ``timestep`` counts from 0, as skrl's trainers pass it: the agent adds the steps its checkpoint had
    completed. The progress bar shows the run's step (``first`` to ``total``).

    :param agent: The multi-agent, initialised by the trainer and loaded from the checkpoint of step ``first``.
    :param env: Its env.
    :param trainer_cfg: The trainer's config (``disable_progressbar``, ``headless``, ``environment_info``, ...).
    :param on_checkpoint: Called with the run's step after each step at which the agent wrote a checkpoint.
    :return: The step reached; the agent's TensorBoard events are on disk then (a failed write raises here).
    """
    from skrl.envs.wrappers.torch import MultiAgentEnvWrapper  # skrl only after the torchrun set-up

    from skrl_marl_ext.trainers import env_info_hook, interact, track_phase_times

    steps = total - first
    agent.enable_training_mode(True)
    observations, _ = env.reset()
    states = env.state()
    after_env_step, on_phase = env_info_hook(agent, env, trainer_cfg), track_phase_times(agent)
    bar = tqdm.tqdm(total=total, initial=first, disable=trainer_cfg.disable_progressbar, file=sys.stdout)
    reached = total
    with bar:
        for timestep in range(steps):
            if stop.signal is not None:  # asked before the first step (while the env and agent were built)
                reached = first + timestep
                break
            written = agent.last_checkpoint
            step = interact(
                agent,
                env,
                observations,
                states,
                timestep=timestep,
                timesteps=steps,
                infos_fn=after_env_step,
                on_phase=on_phase,
            )
            if env.num_envs == 1 and isinstance(env, MultiAgentEnvWrapper) and not env.agents:  # one env: its end
                with torch.no_grad():
                    observations, _ = env.reset()
                    states = env.state()
            else:
                observations, states = step.next_observations, step.next_states
            bar.update(1)
            if agent.last_checkpoint is not written:
                on_checkpoint(first + timestep + 1)
    if getattr(agent, "writer", None) is not None:
        agent.writer.flush()
    return reached
