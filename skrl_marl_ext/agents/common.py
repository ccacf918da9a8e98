"""Machinery shared by every agent of the package (on-policy MAPPO/IPPO and off-policy MADDPG).

Grouping of agents by shared model objects, preprocessor construction, the grad scaler, the initial parameter
broadcast of a distributed run and the stacking of per-agent tensors into one ``(G, num_envs, size)`` batch.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium
import torch
from packaging import version

from skrl_marl_ext import distributed
from skrl_marl_ext.agents.config import MarlCfg


def identity(x, *args, **kwargs):
    """The preprocessor used when none is configured."""
    return x


def make_grad_scaler(device_type: str, enabled: bool):
    """``torch.amp.GradScaler`` on torch >= 2.4, ``torch.cuda.amp.GradScaler`` before (disabled unless ``enabled``)."""
    if version.parse(torch.__version__) >= version.parse("2.4"):
        return torch.amp.GradScaler(device=device_type, enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled)  # pragma: no cover - old torch


def make_preprocessor(cls: type | None, kwargs: dict | None, *, size: Any, device: Any) -> Callable:
    """Instantiate a skrl-style preprocessor, filling ``size`` and ``device`` when the class takes them.

    :param cls: Preprocessor class, or None/False for the identity.
    :param kwargs: The user's keyword arguments (``size``/``device`` given there win).
    :param size: Space or int passed as ``size`` unless the user gave one.
    :param device: Device passed as ``device`` unless the user gave one.
    """
    if not cls:
        return identity
    kwargs = dict(kwargs or {})
    try:
        parameters = inspect.signature(cls).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        parameters = {}
    if "size" in parameters and "size" not in kwargs:
        kwargs["size"] = size
    if "device" in parameters and "device" not in kwargs:
        kwargs["device"] = device
    return cls(**kwargs)


def group_agents(
    *,
    owner: str,
    possible_agents: Sequence[str],
    models: dict[str, dict[str, torch.nn.Module]],
    roles: Sequence[str],
    spaces: dict[str, dict[str, gymnasium.Space | None]],
    cfg: MarlCfg,
    group_fields: Sequence[str],
) -> list[list[str]]:
    """Partition the agents into groups that share the very same model object in every role.

    Agents that share one model must share all of them (else an error), have equal spaces and equal values of
    ``group_fields`` (they form one loss and one optimiser step).

    :param roles: Model roles that define a group, e.g. ``("policy", "value")``.
    :param spaces: ``{"observation": spaces, "action": spaces, ...}`` that must agree within a group.
    :return: Lists of agent names in ``possible_agents`` order, one per group.
    """
    members: dict[tuple[int, ...], list[str]] = {}
    owner_of: dict[int, tuple[int, ...]] = {}
    for uid in possible_agents:
        key = tuple(id(models[uid][role]) for role in roles)
        for role in roles:
            previous = owner_of.setdefault(id(models[uid][role]), key)
            if previous != key:
                other = members[previous][0]
                raise ValueError(
                    f"{owner}: agents '{other}' and '{uid}' share the {role} model but not the others; agents that "
                    f"share models must share all of {list(roles)} (or none)"
                )
        members.setdefault(key, []).append(uid)

    for uids in members.values():
        first = uids[0]
        for uid in uids[1:]:
            for what, per_agent in spaces.items():
                if per_agent[uid] != per_agent[first]:
                    raise ValueError(
                        f"{owner}: agents '{first}' and '{uid}' share their models but have different {what} "
                        f"spaces ({per_agent[first]} vs {per_agent[uid]}); shared models need equal spaces"
                    )
            for field in group_fields:
                if cfg.value_for(field, uid) != cfg.value_for(field, first):
                    raise ValueError(
                        f"{owner}: agents '{first}' and '{uid}' share their models (one optimiser, one loss) but "
                        f"cfg.{field} differs between them; give them the same value"
                    )
    return list(members.values())


def broadcast_modules(modules: Sequence[torch.nn.Module]) -> None:
    """Make every rank start from rank 0's parameters (no-op without a process group); each module once."""
    if not distributed.is_distributed():
        return
    for module in {id(m): m for m in modules}.values():
        distributed.broadcast_state(module)


def stack_agents(
    tensors: dict[str, torch.Tensor] | None, uids: Sequence[str], out: torch.Tensor | None = None
) -> torch.Tensor | None:
    """Stack the agents' tensors into ``(G, num_envs, size)``, zeros for agents absent from the dict.

    :param tensors: ``{agent: (num_envs, size)}``; may lack agents (they are zero-filled) or be None.
    :param out: Preallocated ``(G, num_envs, size)`` destination (dtype converted when it differs).
    :return: The stacked tensor (``out`` when given), or None when no agent of ``uids`` is present.
    """
    items = [tensors.get(uid) if tensors else None for uid in uids]
    if out is None:
        like = next((x for x in items if x is not None), None)
        if like is None:
            return None
        if len(items) == 1:
            return like.unsqueeze(0)
        items = [x if x is not None else torch.zeros_like(like) for x in items]
        return torch.stack(items)
    if all(x is not None and x.dtype == out.dtype for x in items):
        return torch.stack(items, out=out)
    for i, x in enumerate(items):
        if x is None:
            out[i].zero_()
        else:
            out[i].copy_(x.reshape(out[i].shape))
    return out
