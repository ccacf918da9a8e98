"""The little the agents need from ``torch.distributed``: no distribution layer of our own.

A run is distributed when a process group is initialised with more than one process: the NCCL group that
skrl creates under ``torchrun`` on GPUs, or any group the user initialised (gloo on CPU, for example).
skrl's own ``config.torch.is_distributed`` looks only at the ``WORLD_SIZE`` variable; we ask the process
group itself, so a user's gloo group works too.

The ``torchrun_*`` functions, :func:`init_torchrun_group` and the helpers after it are what ``skrl-marl train`` needs
to run under ``torchrun``: create the group before skrl is imported, agree on a run name, check at the end that every
rank holds the same parameters, and tear the group down.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

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
                if tensor.is_contiguous():
                    dist.broadcast(tensor.data, src=src)
                else:  # collectives take dense tensors (a batched group's linear weights are stored transposed)
                    dense = tensor.data.contiguous()
                    dist.broadcast(dense, src=src)
                    tensor.data.copy_(dense)


def broadcast_int(value: int, *, device: torch.device | str, src: int = 0) -> int:
    """Rank ``src``'s ``value`` (an int64) on every rank; ``value`` itself when not distributed.

    :param device: Where the collective runs (the rank's CUDA device under NCCL).
    """
    if not is_distributed():
        return value
    tensor = torch.tensor([value], dtype=torch.int64, device=device)
    dist.broadcast(tensor, src=src)
    return int(tensor.item())


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


# ---------------------------------------------------------------------------------------------------- torchrun


def torchrun_world_size() -> int:
    """``WORLD_SIZE`` that ``torchrun`` gave this process (1 outside torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def torchrun_local_rank() -> int:
    """``LOCAL_RANK`` that ``torchrun`` gave this process (0 outside torchrun)."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def torchrun_device(device: str) -> str:
    """The device of this process for a requested ``device``: ``cuda:LOCAL_RANK`` for CUDA under torchrun.

    :param device: The requested device (``cpu``, ``cuda``, ``cuda:0``, ...).
    """
    if torchrun_world_size() > 1 and torch.device(device).type == "cuda":
        return f"cuda:{torchrun_local_rank()}"
    return device


def init_torchrun_group(device: str) -> bool:
    """Create the process group of a ``torchrun`` launch; call it before the first import of skrl.

    gloo when ``device`` is a CPU device; NCCL on CUDA, after ``torch.cuda.set_device(LOCAL_RANK)``. ``WORLD_SIZE``
    is hidden while skrl is imported here, so skrl's import-time setup (``init_process_group("nccl")`` whenever
    ``WORLD_SIZE > 1``, which cannot work on CPU) leaves the group alone; skrl's ``config.torch`` then reads one
    process, and this package's agents take the group itself (:func:`is_distributed`). An existing group is used
    as it is.

    :param device: The requested device (``cpu``, ``cuda``, ...).

    :return: Whether the group was created here (then :func:`shutdown_torchrun_group` destroys it); False outside
        torchrun (``WORLD_SIZE`` unset or 1), where nothing is done.
    """
    if dist.is_initialized() or torchrun_world_size() <= 1:
        return False
    world_size = torchrun_world_size()
    backend = "gloo"
    if torch.device(device).type == "cuda":
        torch.cuda.set_device(torchrun_local_rank())
        backend = "nccl"
    del os.environ["WORLD_SIZE"]
    try:
        dist.init_process_group(backend, rank=int(os.environ["RANK"]), world_size=world_size)
        import skrl  # noqa: F401  (imported while WORLD_SIZE is hidden)
    finally:
        os.environ["WORLD_SIZE"] = str(world_size)
    return True


def shutdown_torchrun_group(*, wait: bool = True) -> None:
    """Destroy the process group, after a barrier unless ``wait`` is False (a rank that failed must not wait)."""
    if not dist.is_initialized():
        return
    if wait:
        dist.barrier()  # every rank done with its collectives before any tears the group down
    dist.destroy_process_group()


def broadcast_object(obj: Any, *, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` (any picklable object) on every rank; ``obj`` itself when not distributed."""
    if not is_distributed():
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def state_checksum(modules: Iterable[torch.nn.Module]) -> torch.Tensor:
    """A float64 checksum of the modules' parameters and buffers, in order: ``(sum, sum of squares, sum weighted by
    position)``, so that different values, or the same values in other places, give another checksum.

    :param modules: The modules (each counted once, as given).

    :return: Shape ``(3,)``, on the device of the modules' tensors (CPU when they have none).
    """
    parts, offset, device = [], 0, torch.device("cpu")
    for module in modules:
        for tensor in module.state_dict().values():
            if not isinstance(tensor, torch.Tensor):
                continue
            flat = tensor.detach().reshape(-1).double()
            device = flat.device
            position = torch.arange(offset + 1, offset + flat.numel() + 1, dtype=torch.float64, device=device)
            parts.append(torch.stack([flat.sum(), (flat * flat).sum(), (flat * position).sum()]))
            offset += flat.numel()
    return torch.stack(parts).sum(dim=0) if parts else torch.zeros(3, dtype=torch.float64, device=device)


def gather_checksums(modules: Iterable[torch.nn.Module]) -> torch.Tensor:
    """:func:`state_checksum` of every rank (a collective: every rank must call it), shape ``(world_size, 3)``."""
    local = state_checksum(modules)
    if not is_distributed():
        return local.unsqueeze(0)
    gathered = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, local)
    return torch.stack(gathered)
