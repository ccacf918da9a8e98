"""Which agents form a group: agents that share their models, and agents with models of their own that run as one
batch (where they can, and by default where it pays)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium
import torch
from torch import nn

from skrl_marl_ext.groups.stacked import stack_signature


def group_agents(
    *,
    owner: str,
    possible_agents: Sequence[str],
    models: dict[str, dict[str, torch.nn.Module]],
    roles: Sequence[str],
    spaces: dict[str, dict[str, gymnasium.Space | None]],
    cfg: Any,
) -> list[list[str]]:
    """Partition the agents into groups that share the very same model object in every role.

    Agents that share one model must share all of them (else an error), have equal spaces and equal values of every
    per-agent config field (they form one loss and one optimiser step).

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
                    + (
                        "; HAPPO takes one value model for all agents, each with its own policy"
                        if role == "value"
                        else ""
                    )
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
            for field in cfg.per_agent_fields():
                if cfg.value_for(field, uid) != cfg.value_for(field, first):
                    raise ValueError(
                        f"{owner}: agents '{first}' and '{uid}' share their models (one optimiser, one loss) but "
                        f"cfg.{field} differs between them; give them the same value"
                    )
    return list(members.values())


def batch_groups(
    groups: list[list[str]],
    *,
    models: dict[str, dict[str, torch.nn.Module]],
    roles: Sequence[str],
    spaces: dict[str, dict[str, gymnasium.Space | None]],
    cfg: Any,
) -> list[tuple[list[str], bool]]:
    """Merge agents with models of their own (groups of one) into batched groups where they can run as one batch.

    Agents batch when, role by role, their models have the same class and parameter and buffer shapes
    (:func:`~skrl_marl_ext.groups.stacked.stack_signature`; lazy parameters not yet initialised do not stack), a model
    serves one role only, and their spaces and
    per-agent config fields agree. A batched group takes the place of its first agent; the order is otherwise kept.

    :param groups: The groups of :func:`group_agents`.
    :return: ``(uids, batched)`` per group.
    """
    keys: dict[tuple, list[str]] = {}
    result: list[tuple[list[str], bool] | tuple] = []
    for uids in groups:
        uid = uids[0]
        role_models = [models[uid][role] for role in roles]
        signatures = tuple(stack_signature(m) for m in role_models)
        if len(uids) > 1 or len({id(m) for m in role_models}) < len(roles) or None in signatures:
            result.append((uids, False))
            continue
        key = (
            signatures,
            tuple(str(per_agent[uid]) for per_agent in spaces.values()),
            tuple(repr(cfg.value_for(field, uid)) for field in cfg.per_agent_fields()),
        )
        if key not in keys:
            keys[key] = []
            result.append(("batch", key))
        keys[key].append(uid)
    return [(keys[item[1]], len(keys[item[1]]) > 1) if item[0] == "batch" else item for item in result]


CPU_MIN_AGENTS = 4
"""``batch_agent_models="auto"`` on a CPU: the fewest agents alike (see :func:`batch_by_default`) that batch."""
CPU_MAX_WIDTH = 128
"""``batch_agent_models="auto"`` on a CPU: the widest layer (output features of a weight; the hidden size of a GRU or
LSTM, whose weights stack 3 or 4 gates of it) that batches."""


def batch_by_default(models: dict[str, dict[str, nn.Module]], uid: str, *, roles: Sequence[str], device: Any) -> bool:
    """The rule of ``batch_agent_models="auto"`` for agent ``uid`` (with models of its own): batched off the CPU; on a
    CPU only where at least :data:`CPU_MIN_AGENTS` agents have models alike (class and parameter shapes, role by role)
    and none of their layers is wider than :data:`CPU_MAX_WIDTH` (on a CPU the stacked call saves per-call overhead,
    which few agents or wide layers do not repay: its large fresh activations cost more there).

    :param models: Every agent's models by role (as handed to the agent).
    :param uid: The agent asking.
    :param roles: The model roles (``"policy"``, ``"value"``).
    :param device: The agent's device.
    """
    if torch.device(device).type != "cpu":
        return True

    def shapes(of: str) -> tuple | None:
        params = [list(models[of][r].parameters()) for r in roles]
        if any(nn.parameter.is_lazy(p) for ps in params for p in ps):
            return None  # not initialised: cannot be stacked (see stack_signature)
        return tuple(
            (type(models[of][r]), tuple(tuple(p.shape) for p in ps)) for r, ps in zip(roles, params, strict=True)
        )

    own = shapes(uid)
    if own is None:
        return False
    alike = {id(models[u][roles[0]]) for u in models if shapes(u) == own}
    widest = max((_width(m) for r in roles for m in models[uid][r].modules()), default=0)
    return len(alike) >= CPU_MIN_AGENTS and widest <= CPU_MAX_WIDTH


PASS_ACTIVATIONS = 2**23
"""``update_agents_at_once="auto"``: the hidden activations (elements, :func:`activation_width` per sample) one pass of
an update's forward and backward may hold before a batched group's agents are split into passes: more agents at once
save kernel launches, fewer keep less alive."""


def activation_width(model: nn.Module) -> int:
    """The hidden activations per sample of ``model``'s forward: the output features of its weights (a GRU's or LSTM's
    hidden size per layer)."""
    return sum(
        module.hidden_size * module.num_layers if isinstance(module, nn.RNNBase) else _width(module)
        for module in model.modules()
    )


def _width(module: nn.Module) -> int:
    """The output features of ``module``'s own widest weight; a GRU's or LSTM's hidden size."""
    if isinstance(module, nn.RNNBase):
        return module.hidden_size
    return max((p.shape[0] for p in module.parameters(recurse=False) if p.dim() >= 2), default=0)


__all__ = ["activation_width", "batch_by_default", "batch_groups", "group_agents"]
