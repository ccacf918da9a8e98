"""MaMuJoCo (Gymnasium-Robotics' multi-agent MuJoCo): one body, its joints split between agents.

``make_mamujoco_env("HalfCheetah", "2x3")`` is ``gymnasium_robotics``' ``mamujoco_v1.parallel_env`` batched by
:class:`~skrl_marl_ext.envs.BatchedParallelEnvWrapper`: float32 spaces, the global state from the env's ``state()``
(the single-agent Gymnasium MuJoCo v5 observation of the whole body), ``num_envs`` copies reset on their own.
Every agent of a copy gets the same reward and done flags.

MuJoCo's default log handler appends each warning (mujoco 4 warns of a deprecated attribute in every Gymnasium model
it loads) to ``MUJOCO_LOG.TXT`` in the working directory. Making an env turns that file off for the process (MuJoCo
still prints to the console; a log file path set with ``mujoco.MjLogConfig`` is kept), and the warnings of the
model loads become Python warnings, each distinct one once.
"""

from __future__ import annotations

import contextlib
import importlib.util
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from skrl_marl_ext.checks.configs import did_you_mean
from skrl_marl_ext.envs.pettingzoo_batched import BatchedParallelEnvWrapper

SCENARIOS = (
    "Ant",
    "HalfCheetah",
    "Hopper",
    "Humanoid",
    "HumanoidStandup",
    "Reacher",
    "Swimmer",
    "Pusher",
    "Walker2d",
    "InvertedPendulum",
    "InvertedDoublePendulum",
    "ManySegmentSwimmer",
    "ManySegmentAnt",
    "CoupledHalfCheetah",
)
"""The scenarios of ``mamujoco_v1`` (gymnasium-robotics 1.4)."""

DOCS = "https://robotics.farama.org/envs/MaMuJoCo/"

_DEFAULT_LOGFILE = "MUJOCO_LOG.TXT"


def parse_mamujoco_name(name: str) -> tuple[str, str | None]:
    """``"HalfCheetah-2x3"`` -> ``("HalfCheetah", "2x3")``; ``"HalfCheetah"`` -> ``("HalfCheetah", None)``, one agent.

    :raises ValueError: On an unknown scenario (the message lists them).
    """
    scenario, _, agent_conf = name.partition("-")
    _check_scenario(scenario)
    return scenario, agent_conf or None


def _check_scenario(scenario: str) -> None:
    if scenario not in SCENARIOS:
        raise ValueError(
            f"unknown MaMuJoCo scenario '{scenario}'.{did_you_mean(scenario, SCENARIOS)} Write "
            f"mamujoco:<scenario>-<agent_conf> (e.g. mamujoco:Ant-4x2) with a scenario of: {', '.join(SCENARIOS)}"
        )


def make_mamujoco_env(
    scenario: str,
    agent_conf: str | None,
    *,
    num_envs: int = 8,
    device: str | torch.device = "cpu",
    seed: int | None = None,
    **kwargs: Any,
) -> BatchedParallelEnvWrapper:
    """Batch ``num_envs`` copies of ``mamujoco_v1.parallel_env(scenario, agent_conf, **kwargs)``.

    :param scenario: A body of :data:`SCENARIOS`, e.g. ``"HalfCheetah"``.
    :param agent_conf: How its joints are split between agents, e.g. ``"2x3"`` (2 agents of 3 joints), ``"6x1"``,
        ``"4x2"``, ``"9|8"``; None: one agent with the whole body. The configurations of each scenario: :data:`DOCS`.
    :param num_envs: Number of copies.
    :param device: Device of the returned tensors (MuJoCo simulates on the CPU).
    :param seed: Seed of the first reset (copy ``i`` gets ``seed + i``).
    :param kwargs: Arguments of ``parallel_env`` (``agent_obsk=1``: joints up to 1 hop away are observed, ...) and of
        the Gymnasium MuJoCo env under it (``max_episode_steps``, ``ctrl_cost_weight``, ...).

    :raises ImportError: If gymnasium-robotics is not installed (the message says what to install).
    :raises ValueError: On an unknown scenario or agent configuration.
    """
    if importlib.util.find_spec("gymnasium_robotics") is None:
        raise ImportError("MaMuJoCo needs gymnasium-robotics; install it: pip install 'skrl-marl-ext[mamujoco]'")
    _check_scenario(scenario)
    from gymnasium_robotics.envs.multiagent_mujoco import mamujoco_v1

    if agent_conf is not None:
        try:
            mamujoco_v1.get_parts_and_edges(scenario, agent_conf)
        except Exception as e:  # gymnasium_robotics raises a bare Exception("UNKNOWN partitioning config: ...")
            raise ValueError(
                f"MaMuJoCo {scenario} has no agent configuration '{agent_conf}' ({e}); {scenario}'s are listed at {DOCS}"
            ) from None
    _keep_mujoco_log_off_disk()
    with _mujoco_warnings_once():
        return BatchedParallelEnvWrapper(
            lambda: mamujoco_v1.parallel_env(scenario, agent_conf, **kwargs),
            num_envs=num_envs,
            device=device,
            seed=seed,
        )


def _keep_mujoco_log_off_disk() -> None:
    """Stop MuJoCo's default handler writing ``MUJOCO_LOG.TXT`` into the working directory (console output stays)."""
    import mujoco

    if not hasattr(mujoco, "MjLogConfig"):  # an older mujoco without log settings: its warnings go through Python
        if mujoco.get_mju_user_warning() is None:
            mujoco.set_mju_user_warning(lambda message: warnings.warn(f"MuJoCo: {message}", RuntimeWarning, 2))
        return
    config = mujoco.MjLogConfig.get()
    if config.logto_file and config.logfile == _DEFAULT_LOGFILE:
        config.logto_file = False
        config.set()


@contextlib.contextmanager
def _mujoco_warnings_once() -> Iterator[None]:
    """MuJoCo's warnings in the block become Python warnings, each distinct message once (unless a user's handler is
    set: then it gets them)."""
    import mujoco

    previous = mujoco.get_mju_user_warning()
    messages: list[str] = []
    if previous is None:
        mujoco.set_mju_user_warning(messages.append)
    try:
        yield
    finally:
        if previous is None:
            mujoco.set_mju_user_warning(None)
        for message in dict.fromkeys(messages):
            warnings.warn(f"MuJoCo: {message}", RuntimeWarning, stacklevel=4)
