"""The preprocessors of a batched group: each agent's statistics its own, applied and updated in one call."""

from __future__ import annotations

from typing import Any

import torch

from skrl_marl_ext.groups.stacked import StackedModules
from skrl_marl_ext.preprocessors import ValueNorm, fold_moments_, per_agent_moments

STACKABLE_PREPROCESSORS = (ValueNorm,)
"""Preprocessor classes whose statistics updates :class:`StackedPreprocessor` knows, besides skrl's
``RunningStandardScaler`` (checked by name in :func:`stackable_preprocessor`)."""


def stackable_preprocessor(cls: Any) -> bool:
    """Whether agents with preprocessors of class ``cls`` (None: none) can form a batched group."""
    from skrl.resources.preprocessors.torch import RunningStandardScaler

    return not cls or (isinstance(cls, type) and issubclass(cls, (RunningStandardScaler, *STACKABLE_PREPROCESSORS)))


class StackedPreprocessor(StackedModules):
    """The preprocessors of a batched group's ``G`` agents (skrl's ``RunningStandardScaler`` or :class:`ValueNorm`),
    each agent's statistics its own, applied and updated in one call. A statistic's name (``running_mean``, ...)
    gives the stacked ``(G, ...)`` tensor whose slices are the agents' own."""

    def __getattr__(self, name: str) -> torch.Tensor:
        buffers = self.__dict__.get("buffers", {})
        if name in buffers:
            return buffers[name]
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __call__(self, x: torch.Tensor, *, agent_dim: int, inverse: bool = False) -> torch.Tensor:
        """Each agent's slice of ``x`` (the agents along ``agent_dim``; a size-1 agent dimension is one tensor for
        all agents) through that agent's preprocessor; the agent dimension of the result has size ``G``."""
        if x.shape[agent_dim] == 1 and self.size > 1:
            x = x.expand(*x.shape[:agent_dim], self.size, *x.shape[agent_dim + 1 :])

        def forward(state, rows):
            with self.swapped(state):
                return self.modules[0](rows, inverse=inverse)

        return self.vmap(forward, x, in_dims=(agent_dim,), out_dims=agent_dim)

    def same_for_all(self) -> bool:
        """Whether every agent's statistics are the same (one host read): then any agent's preprocessor gives what each
        agent's would."""
        return bool(torch.stack([(t == t[:1]).all() for t in self.buffers.values()]).all())

    @torch.no_grad()
    def update(self, x: torch.Tensor, mask: torch.Tensor | None, *, agent_dim: int) -> None:
        """Fold each agent's unmasked rows of ``x`` (agents along ``agent_dim``; size 1: the same rows for all) into
        its own statistics, summed over ranks (:func:`~skrl_marl_ext.preprocessors.per_agent_moments`: a shared ``x``
        is not expanded to the agents)."""
        shift = self.buffers.get("running_mean")
        moments = per_agent_moments(x, mask, agents=self.size, agent_dim=agent_dim, shift=shift)
        fold_moments_(_Stack(self), *moments)


class _Stack:
    """The stacked buffers of ``G`` preprocessors by name, counts shaped ``(G, 1)`` (views of the stack), with the
    modules' settings: what :func:`~skrl_marl_ext.preprocessors.fold_moments_` updates in place."""

    def __init__(self, stacked: StackedPreprocessor) -> None:
        for name, tensor in stacked.buffers.items():
            setattr(self, name, tensor.unsqueeze(-1) if name == "current_count" else tensor)
        if isinstance(stacked.modules[0], ValueNorm):
            self.beta = stacked.modules[0].beta


__all__ = ["StackedPreprocessor", "stackable_preprocessor"]
