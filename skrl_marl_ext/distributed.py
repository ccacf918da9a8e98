"""The little the agents need from ``torch.distributed``: no distribution layer of our own.

A run is distributed when a process group is initialised with more than one process: the NCCL group that
skrl creates under ``torchrun`` on GPUs, or any group the user initialised (gloo on CPU, for example).
skrl's own ``config.torch.is_distributed`` looks only at the ``WORLD_SIZE`` variable; we ask the process
group itself, so a user's gloo group works too.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.distributed as dist


def is_distributed() -> bool:
    """Whether a process group of more than one process is initialised."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_size() -> int:
    """Number of processes in the group (1 when not distributed)."""
    return dist.get_world_size() if is_distributed() else 1


def rank() -> int:
    """Rank of this process (0 when not distributed)."""
    return dist.get_rank() if is_distributed() else 0


def broadcast_state(module: torch.nn.Module, *, src: int = 0) -> None:
    """Copy every parameter and buffer of ``module`` from rank ``src`` to all ranks (in place)."""
    if not is_distributed():
        return
    with torch.no_grad():
        for tensor in module.state_dict(keep_vars=True).values():
            if isinstance(tensor, torch.Tensor):
                dist.broadcast(tensor.data, src=src)


def all_reduce_mean_(tensor: torch.Tensor) -> torch.Tensor:
    """Average ``tensor`` over all ranks, in place; a no-op when not distributed."""
    if is_distributed():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        tensor /= dist.get_world_size()
    return tensor


def all_reduce_sum_(tensor: torch.Tensor) -> torch.Tensor:
    """Sum ``tensor`` over all ranks, in place; a no-op when not distributed."""
    if is_distributed():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def all_reduce_gradients_(parameters: Iterable[torch.nn.Parameter]) -> None:
    """Average the gradients of ``parameters`` over all ranks with one collective (flattened)."""
    if not is_distributed():
        return
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    all_reduce_mean_(flat)
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()
