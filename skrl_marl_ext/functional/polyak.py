"""Polyak (soft) updates of target networks, in skrl's convention.

skrl's ``Model.update_parameters(model, polyak)`` sets ``target = polyak * online + (1 - polyak) * target``: ``polyak``
is the weight of the *online* network (``tau`` in Lillicrap et al. 2016, https://arxiv.org/abs/1509.02971), so
``polyak=1`` is a hard copy and ``polyak=0`` leaves the target as it is.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.optim.swa_utils import get_ema_multi_avg_fn


@torch.no_grad()
def polyak_update_(*, target: Iterable[torch.Tensor], online: Iterable[torch.Tensor], polyak: float) -> None:
    """``target <- polyak * online + (1 - polyak) * target`` for every pair of tensors, in place (one fused op).

    :param target: Target tensors (parameters of the target network), updated in place.
    :param online: Online tensors of the same shapes, in the same order.
    :param polyak: Weight of the online tensors, in ``[0, 1]``.
    """
    target, online = list(target), list(online)
    if len(target) != len(online):
        raise ValueError(f"polyak_update_: {len(target)} target tensors but {len(online)} online tensors")
    if target:
        # torch's EMA of a parameter list (one multi-tensor lerp): decay is the weight the target keeps
        get_ema_multi_avg_fn(decay=1.0 - float(polyak))(target, online, None)


@torch.no_grad()
def polyak_update_reference_(*, target: Iterable[torch.Tensor], online: Iterable[torch.Tensor], polyak: float) -> None:
    """The plain loop that :func:`polyak_update_` must agree with (same arguments)."""
    for t, o in zip(target, online, strict=True):
        t.mul_(1.0 - polyak).add_(o, alpha=polyak)
