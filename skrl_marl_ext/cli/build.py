"""The env and the Runner of a run, built from a spec and a config; what they raise becomes a one-line usage error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from skrl_marl_ext.checks.configs import did_you_mean
from skrl_marl_ext.cli.errors import UsageError


def check_device(device: str) -> None:
    """Raise :class:`UsageError` unless ``device`` is a torch device that exists here."""
    try:
        if torch.device(device).type == "cuda" and not torch.cuda.is_available():
            raise UsageError(f"--device {device}: CUDA is not available here; use --device cpu")
    except RuntimeError:
        hint = did_you_mean(device, ("cpu", "cuda", "mps", "xpu"))
        raise UsageError(f"--device {device}: not a torch device.{hint} Devices: cpu, cuda, cuda:1, ...") from None


def build_env(
    spec: str,
    *,
    num_envs: int,
    device: str,
    seed: int | None,
    env_kwargs: dict[str, Any],
    on_episodes: Callable[[int, list[list[float]]], None] | None = None,
):
    """:func:`skrl_marl_ext.envs.make_env` behind an :class:`EpisodeRecorder`; bad specs become :class:`UsageError`.

    :param on_episodes: Where the recorder hands the episodes as they end (training: to ``episodes.csv``), keeping
        none in memory; None keeps them all (``eval``'s few).
    """
    from skrl_marl_ext.envs import EpisodeRecorder, make_env

    check_device(device)
    try:
        env = make_env(spec, num_envs=num_envs, device=device, seed=seed, **env_kwargs)
    except (ValueError, ImportError) as e:
        raise UsageError(f"--env {spec}: {e}") from None
    except TypeError as e:  # an env argument the env does not take
        raise UsageError(f"--env {spec}: {e}; check --env-arg") from None
    if on_episodes is None:
        return EpisodeRecorder(env)
    return EpisodeRecorder(env, keep=0, on_episodes=on_episodes)


def build_runner(env, cfg: dict[str, Any]):
    """Our :class:`~skrl_marl_ext.runner.Runner`; config mistakes become :class:`UsageError`.

    The Runner checks every key and value of ``cfg`` by name before it builds anything (and never runs code from
    it), so its ``ValueError`` already names the field, the type expected and the value received.
    """
    from skrl_marl_ext.runner import Runner

    algo = str(cfg["agent"].get("class", "")).lower()
    if algo in ("mappo", "happo") and any(space is None for space in env.state_spaces.values()):
        raise UsageError(f"{algo.upper()} needs a global state and this env has none: use --algo ippo")
    try:
        return Runner(env, cfg)
    except (ValueError, KeyError) as e:
        raise UsageError(f"config: {e}") from None
    except TypeError as e:  # a mistake the checks do not know of: still one line
        raise UsageError(f"config: {e}") from None
