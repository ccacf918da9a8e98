"""Loading checkpoints strictly: a checkpoint of other agents or other model shapes is refused, not half-loaded.

skrl 2.1.1's ``MultiAgent.load`` skips, with a log warning, every agent and module it does not find, so a
checkpoint of a 3-agent run loads "successfully" into a 4-agent one and trains the fourth agent from scratch.
"""

from __future__ import annotations

import os
from typing import Any

import torch


def load_checkpoint(agent: Any, path: str | os.PathLike) -> None:
    """Load a checkpoint written by skrl's ``save()`` (``{agent: {module name: state_dict}}``) into ``agent``.

    Every agent of ``agent.possible_agents`` and every module of its ``checkpoint_modules`` must be in the file, and
    nothing else; each state dict must fit its module. Models are left in eval mode, as skrl leaves them.

    :param agent: A skrl ``MultiAgent`` (its ``possible_agents``, ``checkpoint_modules`` and ``device`` are used).
    :param path: File written by ``agent.save()`` or by the trainer's checkpoints (``agent_<step>.pt``).

    :raises ValueError: Naming the agents, modules or tensors that do not match.
    """
    owner = type(agent).__name__
    modules = torch.load(path, map_location=agent.device, weights_only=False)
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
