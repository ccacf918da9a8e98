"""The env and the Runner of a run, built from a spec and a config; what they raise becomes a one-line usage error."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from typing import Any

import torch

from skrl_marl_ext.cli.errors import UsageError, did_you_mean


def check_device(device: str) -> None:
    """Raise :class:`UsageError` unless ``device`` is a torch device that exists here."""
    try:
        if torch.device(device).type == "cuda" and not torch.cuda.is_available():
            raise UsageError(f"--device {device}: CUDA is not available here; use --device cpu")
    except RuntimeError:
        raise UsageError(f"--device {device}: not a torch device (cpu, cuda, cuda:1, ...)") from None


def build_env(spec: str, *, num_envs: int, device: str, seed: int | None, env_kwargs: dict[str, Any]):
    """:func:`skrl_marl_ext.envs.make_env` behind an :class:`EpisodeRecorder`; bad specs become :class:`UsageError`."""
    from skrl_marl_ext.envs import EpisodeRecorder, make_env

    check_device(device)
    try:
        env = make_env(spec, num_envs=num_envs, device=device, seed=seed, **env_kwargs)
    except (ValueError, ImportError) as e:
        raise UsageError(f"--env {spec}: {e}") from None
    except TypeError as e:  # an env argument the env does not take
        raise UsageError(f"--env {spec}: {e}; check --env-arg") from None
    return EpisodeRecorder(env)


def build_runner(env, cfg: dict[str, Any]):
    """Our :class:`~skrl_marl_ext.runner.Runner`; config mistakes become :class:`UsageError`."""
    from skrl_marl_ext.runner import Runner

    algo = str(cfg["agent"].get("class", "")).lower()
    if algo in ("mappo", "happo") and any(space is None for space in env.state_spaces.values()):
        raise UsageError(f"{algo.upper()} needs a global state and this env has none: use --algo ippo")
    try:
        return Runner(env, cfg)
    except (ValueError, KeyError) as e:
        raise UsageError(f"config: {e}") from None
    except TypeError as e:
        raise UsageError(f"config: {_explain_type_error(e, cfg, algo)}") from None


# ---------------------------------------------------------------------------------------------------- config keys


_UNEXPECTED_ARGUMENT = re.compile(r"(?P<owner>[\w.]+)\(\) got an unexpected keyword argument '(?P<key>\w+)'")
_FILLED_BY_RUNNER = {"self", "observation_space", "state_space", "action_space", "device", "num_envs"}
_ARGUMENT_OWNERS = (
    "skrl_marl_ext.models",
    "skrl.utils.model_instantiators.torch",
    "skrl.memories.torch",
    "skrl.trainers.torch",
)
"""Where the classes (and skrl's model instantiator functions) that a Runner config's sections name are found."""


def _explain_type_error(error: TypeError, cfg: dict[str, Any], algo: str) -> str:
    """A key that a class of the config does not take, said as the config says it, with the closest name.

    skrl's Runner passes each section to a class as keyword arguments, so a wrong key surfaces as ``X() got an
    unexpected keyword argument 'k'``: for the agent section it becomes the agents' own did-you-mean error, for a
    model, memory or trainer section ``models.policy.k: GaussianMLP takes no argument 'k'. Did you mean ...?``.
    """
    match = _UNEXPECTED_ARGUMENT.search(str(error))
    if match is None:
        return str(error)
    owner, key = match["owner"].removesuffix(".__init__"), match["key"]
    from skrl_marl_ext.runner import load_algorithm

    agent_class, cfg_class = load_algorithm(algo)  # build_runner's Runner has checked the name
    if owner == cfg_class.__name__:
        from skrl_marl_ext.config import build_cfg

        try:
            build_cfg(cfg_class, {key: None}, owner=agent_class.__name__)
        except ValueError as e:
            return str(e)
    places = [f"models.{role}" for role, section in (cfg.get("models") or {}).items() if _has_key(section, key)]
    places += [name for name in ("memory", "trainer") if _has_key(cfg.get(name), key)]
    known = _arguments(owner)
    where = " / ".join(f"{place}.{key}" for place in places) or key
    hint = f"{did_you_mean(key, known)} Its arguments: {', '.join(known)}" if known else ""
    return f"{where}: {owner} takes no argument '{key}'.{hint}"


def _has_key(section: Any, key: str) -> bool:
    return isinstance(section, dict) and key in section


def _arguments(name: str) -> list[str]:
    """Keyword arguments of the model, memory or trainer config class ``name`` (empty when it is not found)."""
    modules = (importlib.import_module(module) for module in _ARGUMENT_OWNERS)
    owner = next((getattr(module, name) for module in modules if hasattr(module, name)), None)
    if owner is None:
        return []
    if dataclasses.is_dataclass(owner):
        return sorted(f.name for f in dataclasses.fields(owner))
    try:
        parameters = inspect.signature(owner).parameters.values()
    except (TypeError, ValueError):  # pragma: no cover - a callable without a signature
        return []
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return sorted(p.name for p in parameters if p.kind in kinds and p.name not in _FILLED_BY_RUNNER)
