"""NaN/inf in stored samples, one scan for the rollout and the replay: find the earliest, or zero and mask them out.

Both take a set of tensors ``{name: (T, R, N, width)}``: ``T`` steps, ``R`` rows (the set's ``G`` agents, or 1 for a
tensor they share), ``N`` envs, beside its ``agent_mask`` ``(T, G, N, 1)``. A rollout is one such set per group; a
replay step one per agent (``T = R = G = 1``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

FIX = (
    'Fix the env, shape the rewards with cfg.rewards_shaper, or set cfg.non_finite="skip" to mask such samples out of '
    "learning"
)
"""The end of every non-finite error."""


def first_non_finite(
    sets: Sequence[tuple[dict[str, torch.Tensor], Sequence[str]]], names: Sequence[str]
) -> tuple[str, str, int, int] | None:
    """The earliest NaN/inf of tensors ``names`` over the sets, or None (one host read when there is none).

    :param sets: ``(tensors, the agent names of their rows)`` per set.
    :param names: The tensors to scan, inputs first (a NaN observation also makes the action non-finite, and through
        the env the rewards after it).
    :return: ``(tensor name, who, step, env)`` at the earliest step, then the first of ``names``, then the first set;
        ``who`` is ``"agent '<name>'"``, or ``"all agents"`` for a tensor the set's agents share.
    """
    # each tensor's extremes (max and min carry a NaN, an inf is one of them): no copy of a rollout
    checked = [tensors[name] for tensors, _ in sets for name in names if name in tensors and tensors[name].numel()]
    if not checked or bool(torch.isfinite(torch.stack([e for t in checked for e in (t.amax(), t.amin())])).all()):
        return None
    offences = []
    for index, (tensors, uids) in enumerate(sets):
        for order, name in enumerate(names):
            bad = ~torch.isfinite(tensors[name]).all(dim=-1) if name in tensors else None  # (T, R, N)
            if bad is not None and bad.any():
                step, row, env = (int(i) for i in bad.nonzero()[0])
                who = f"agent '{uids[row]}'" if bad.shape[1] == len(uids) else "all agents"
                offences.append((step, order, index, name, who, env))
    step, _, _, name, who, env = min(offences)
    return name, who, step, env


def skip_non_finite_(tensors: dict[str, torch.Tensor], names: Sequence[str]) -> torch.Tensor:
    """Zero the NaN/inf of tensors ``names`` in place and mask their samples (every agent's, for a shared tensor) out
    of ``tensors["agent_mask"]``.

    :return: How many (step, agent, env) samples hold a NaN/inf (a tensor: no host read).
    """
    mask = tensors["agent_mask"]
    bad = torch.zeros_like(mask[..., 0])  # (T, G, N)
    for name in names:
        if name in tensors:
            bad |= ~torch.isfinite(tensors[name]).all(dim=-1)
            tensors[name].nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
    mask &= ~bad.unsqueeze(-1)
    return bad.sum()
