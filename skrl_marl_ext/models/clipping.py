"""skrl's Gaussian action clipping, seen from the agents: whether a policy clips its samples, and sampling without it.

skrl's ``GaussianMixin(clip_actions=True)`` clips the sampled action to the action space and then takes the
log-probability of the *clipped* action: a density evaluated at the bound stands for the probability mass beyond it,
which biases the policy gradient (on VMAS balance it halved the return). The on-policy agents' option
``log_prob_of_unclipped_actions`` samples without the mixin's clip (:func:`unclipped_sampling`), keeps the sample and
its log-probability for the update, and clips the action the env receives itself. The mixin keeps its setting in a
private attribute (skrl 2.1.1's ``_g_clip_actions``); this module is the one place that reads or sets it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from skrl.models.torch import GaussianMixin, Model


def clips_gaussian_samples(model: Model) -> bool:
    """Whether ``model`` is a skrl Gaussian policy built with ``clip_actions=True``."""
    return isinstance(model, GaussianMixin) and bool(getattr(model, "_g_clip_actions", False))


@contextlib.contextmanager
def unclipped_sampling(model: Model) -> Iterator[None]:
    """Within the block, ``model`` (a :func:`clips_gaussian_samples` policy) returns its samples unclipped, with their
    own log-probabilities; its clipping is restored afterwards."""
    model._g_clip_actions = False
    try:
        yield
    finally:
        model._g_clip_actions = True
