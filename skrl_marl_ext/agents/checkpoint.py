"""Loading checkpoints safely and strictly: only tensors and state dicts are unpickled, and a checkpoint of other
agents or other model shapes is refused, not half-loaded.

skrl 2.1.1's ``MultiAgent.load`` unpickles with ``weights_only=False``, so a crafted checkpoint runs arbitrary code
when loaded; here the file is read with ``weights_only=True``. Everything ``save()`` writes for our agents (model,
Adam, LR scheduler, preprocessor, ValueNorm and GradScaler state dicts) is made of tensors, numbers, strings, lists
and dicts, which torch's weights-only unpickler accepts without any allow-listing.

skrl 2.1.1's ``MultiAgent.load`` also skips, with a log warning, every agent and module it does not find, so a
checkpoint of a 3-agent run loads "successfully" into a 4-agent one and trains the fourth agent from scratch.
"""

from __future__ import annotations

import os
import pickle
import re
from typing import Any

import torch

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _unpickling_reason(error: Exception) -> str:
    """One line of torch's weights-only refusal: what it refused (e.g. ``Unsupported global: GLOBAL exec ...``).

    :param error: The ``pickle.UnpicklingError`` raised by ``torch.load(..., weights_only=True)``.
    """
    text = _ANSI.sub("", str(error))
    _, marker, rest = text.partition("WeightsUnpickler error:")
    lines = [line.strip() for line in (rest if marker else text).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    # keep what was refused, not torch's advice on how to allow-list it
    return lines[0].split(" Please use ")[0].split(" Please file ")[0]


def read_checkpoint(path: str | os.PathLike, *, map_location: Any = None, owner: str = "load") -> Any:
    """Unpickle a checkpoint with ``torch.load(..., weights_only=True)``: tensors and plain containers only.

    A file holding anything else (an object whose unpickling would run code) is refused before anything runs.

    :param path: Checkpoint file.
    :param map_location: Device the tensors are loaded to (as for ``torch.load``).
    :param owner: Prefix of the error message (e.g. ``"MAPPO.load"``).

    :raises ValueError: When torch refuses to unpickle the file, naming the file and torch's reason.
    """
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        raise ValueError(
            f"{owner}: {path} holds objects other than tensors and state dicts and was refused without running them "
            f"(torch: {_unpickling_reason(error)}); only checkpoints written by save() and from trusted sources load"
        ) from None


def load_checkpoint(agent: Any, path: str | os.PathLike) -> None:
    """Load a checkpoint written by skrl's ``save()`` (``{agent: {module name: state_dict}}``) into ``agent``.

    Every agent of ``agent.possible_agents`` and every module of its ``checkpoint_modules`` must be in the file, and
    nothing else; each state dict must fit its module. Models are left in eval mode, as skrl leaves them.

    :param agent: A skrl ``MultiAgent`` (its ``possible_agents``, ``checkpoint_modules`` and ``device`` are used).
    :param path: File written by ``agent.save()`` or by the trainer's checkpoints (``agent_<step>.pt``).

    :raises ValueError: Naming the agents, modules or tensors that do not match, or when the file holds objects other
        than tensors and state dicts (refused without unpickling them, see :func:`read_checkpoint`).
    """
    owner = type(agent).__name__
    modules = read_checkpoint(path, map_location=agent.device, owner=f"{owner}.load")
    if not isinstance(modules, dict):
        raise ValueError(f"{owner}.load: {path} is not a checkpoint written by save() (got {type(modules).__name__})")
    expected, saved = list(agent.possible_agents), list(modules)
    if set(saved) != set(expected):
        missing = [uid for uid in expected if uid not in modules]
        extra = [uid for uid in saved if uid not in expected]
        raise ValueError(
            f"{owner}.load: {path} holds agents {saved} but this agent has {expected} "
            f"(missing: {missing}, not in this agent: {extra}); load a checkpoint of a run with the same agents"
        )
    for uid in expected:
        wanted = {name for name, module in agent.checkpoint_modules[uid].items() if module is not None}
        have = set(modules[uid])
        if wanted != have:
            raise ValueError(
                f"{owner}.load: {path} has modules {sorted(have)} for agent '{uid}' but this agent expects "
                f"{sorted(wanted)}; load a checkpoint of the same algorithm and configuration "
                "(preprocessors, schedulers and mixed precision included)"
            )
    for uid in expected:
        for name, data in modules[uid].items():
            module = agent.checkpoint_modules[uid][name]
            try:
                module.load_state_dict(data)
            except (RuntimeError, KeyError, ValueError) as error:
                raise ValueError(
                    f"{owner}.load: {path}: '{uid}' module '{name}' does not fit this agent's: {error}. "
                    "Build the models with the sizes of the run that wrote the checkpoint"
                ) from None
            if isinstance(module, torch.nn.Module):
                module.eval()
