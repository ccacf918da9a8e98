"""Pure tensor math of the algorithms: keyword-only functions with the shapes in their docstrings."""

from skrl_marl_ext.functional.gae import compute_gae, compute_gae_reference
from skrl_marl_ext.functional.ppo import (
    approx_kl,
    clip_fraction,
    clipped_surrogate_loss,
    explained_variance,
    masked_mean,
    masked_mean_var,
    normalize_advantages,
    squared_or_huber_error,
    value_loss,
)

__all__ = [
    "approx_kl",
    "clip_fraction",
    "clipped_surrogate_loss",
    "compute_gae",
    "compute_gae_reference",
    "explained_variance",
    "masked_mean",
    "masked_mean_var",
    "normalize_advantages",
    "squared_or_huber_error",
    "value_loss",
]
