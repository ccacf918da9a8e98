"""Pure tensor math of the algorithms: keyword-only functions with the shapes in their docstrings."""

from skrl_marl_ext.functional.gae import compute_gae, compute_gae_reference
from skrl_marl_ext.functional.gumbel import (
    fill_masked,
    gumbel_max_actions,
    gumbel_softmax_st,
    one_hot_actions,
    sample_gumbel,
)
from skrl_marl_ext.functional.maddpg import (
    actor_loss,
    actor_loss_reference,
    critic_loss,
    critic_loss_reference,
    critic_target,
    critic_target_reference,
    group_mean,
    joint_with_own_actions,
    joint_with_own_actions_reference,
    smooth_target_actions,
    smooth_target_actions_reference,
)
from skrl_marl_ext.functional.polyak import polyak_update_, polyak_update_reference_
from skrl_marl_ext.functional.ppo import (
    approx_kl,
    clip_fraction,
    clipped_surrogate_loss,
    explained_variance,
    masked_mean,
    masked_mean_var,
    normalize_advantages,
    ppo_loss,
    squared_or_huber_error,
    value_loss,
)
from skrl_marl_ext.functional.td import td_target

__all__ = [
    "actor_loss",
    "actor_loss_reference",
    "approx_kl",
    "clip_fraction",
    "clipped_surrogate_loss",
    "compute_gae",
    "compute_gae_reference",
    "critic_loss",
    "critic_loss_reference",
    "critic_target",
    "critic_target_reference",
    "explained_variance",
    "fill_masked",
    "group_mean",
    "gumbel_max_actions",
    "gumbel_softmax_st",
    "joint_with_own_actions",
    "joint_with_own_actions_reference",
    "masked_mean",
    "masked_mean_var",
    "normalize_advantages",
    "one_hot_actions",
    "polyak_update_",
    "polyak_update_reference_",
    "ppo_loss",
    "sample_gumbel",
    "smooth_target_actions",
    "smooth_target_actions_reference",
    "squared_or_huber_error",
    "td_target",
    "value_loss",
]
