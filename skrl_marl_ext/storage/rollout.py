"""The on-policy rollout buffer of one agent group: allocation, step writes, the non-finite check, mini-batches.

A :class:`RolloutBuffer` preallocates every tensor of a rollout as ``(T, rows, N, width)``: ``T`` steps, ``rows`` the
group's ``G`` agents (1 for a state the whole group shares), ``N`` envs. The agent writes one step at a time from
``record_transition`` (acting writes nothing). For the update, :meth:`RolloutBuffer.flat` gives a tensor per agent as
``(rows, T * N, width)`` (sample ``i`` is step ``i // N``, env ``i % N``, the order of skrl's memories) and
:func:`mini_batch_indexes` the sample indexes of each mini-batch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

from skrl_marl_ext.storage.non_finite import FIX, first_non_finite, skip_non_finite_

Spec = tuple[int, int, torch.dtype]
"""``(rows, width, dtype)`` of one rollout tensor."""

CHECKED = ("observations", "states", "rewards", "actions", "log_prob", "values", "final_values")
"""The tensors scanned for NaN/inf before an update: inputs first, then what was computed from them (a NaN
observation makes the action and, through the env, the team's rewards non-finite too)."""


class RolloutBuffer:
    def __init__(self, specs: dict[str, Spec], *, rollouts: int, num_envs: int, device: torch.device | str) -> None:
        """Zeroed ``(rollouts, rows, num_envs, width)`` tensors, one per entry of ``specs``.

        :param specs: ``{name: (rows, width, dtype)}``.
        :param rollouts: Steps per rollout ``T``.
        :param num_envs: Envs per step ``N``.
        :param device: Device of the tensors.
        """
        self.rollouts, self.num_envs = rollouts, num_envs
        self.tensors = {
            name: torch.zeros(rollouts, rows, num_envs, width, dtype=dtype, device=device)
            for name, (rows, width, dtype) in specs.items()
        }

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.tensors[name]

    def write(self, step: int, **values: torch.Tensor) -> None:
        """Write step ``step`` of the named tensors; each value is viewed as ``(rows, N, width)``."""
        for name, value in values.items():
            target = self.tensors[name][step]
            target.copy_(value.reshape(target.shape))

    def flat(self, name: str) -> torch.Tensor:
        """Tensor ``name`` as ``(rows, T * N, width)``: sample ``i`` is step ``i // N`` of env ``i % N``."""
        x = self.tensors[name]
        return x.transpose(0, 1).reshape(x.shape[1], x.shape[0] * x.shape[2], x.shape[-1])

    def skip_non_finite_bootstrap(self, last_values: torch.Tensor) -> torch.Tensor:
        """``last_values`` ``(1, G, N, 1)`` (the critic's values after the last step) with non-finite ones zeroed and
        the last step's samples that would bootstrap from them masked out of ``agent_mask``."""
        finite = torch.isfinite(last_values)
        self.tensors["agent_mask"][-1:] &= finite
        return torch.where(finite, last_values, 0.0)


def check_finite(groups: Sequence, *, skip: bool, owner: str, names: Sequence[str] = CHECKED) -> torch.Tensor | None:
    """NaN/inf in the groups' rollouts (``group.rollout``, ``group.uids``): with ``skip`` the affected samples are
    zeroed and masked out of every loss and statistic (no host read), else an error naming the agent, the tensor and
    the step (one host read). The scan is :mod:`~skrl_marl_ext.storage.non_finite`'s, shared with the replay.

    :return: With ``skip``, how many (step, agent, env) samples were masked (a tensor); else None.
    :raises ValueError: Without ``skip``, at the earliest non-finite step over all groups, inputs before what was
        computed from them.
    """
    rollouts = [group for group in groups if group.rollout is not None]
    if skip:
        skipped = (skip_non_finite_(group.rollout.tensors, names) for group in rollouts)
        return sum(skipped, torch.zeros((), dtype=torch.long))
    found = first_non_finite([(group.rollout.tensors, group.uids) for group in rollouts], names)
    if found is not None:
        name, who, step, env = found
        raise ValueError(
            f"{owner}: non-finite {name} (NaN or inf) for {who} at step {step} of the rollout, env {env}; refusing to "
            f"learn from them. {FIX}"
        )
    return None


def mini_batch_indexes(
    samples: int, mini_batches: int, *, device: torch.device | str, shuffle: bool = True
) -> Iterator[torch.Tensor]:
    """The sample indexes of one epoch's mini-batches, split as ``np.array_split`` splits them (as skrl's memories
    split; ``Tensor.chunk`` may give fewer mini-batches): a random permutation with ``shuffle``, else the samples in
    order, i.e. contiguous blocks of steps, the same every epoch (skrl 2.1.1's ``Memory.sample_all``)."""
    order = torch.randperm(samples, device=device) if shuffle else torch.arange(samples, device=device)
    yield from torch.tensor_split(order, mini_batches)
