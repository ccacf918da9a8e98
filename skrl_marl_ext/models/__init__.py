"""Model helpers a user needs: a masked categorical mixin, agent-id input sizing, MLP and GRU/LSTM models, MADDPG's
deterministic policy and Q critic, MASAC's and HASAC's squashed Gaussian policy."""

from skrl_marl_ext.models.agent_id import agent_id_space, append_agent_id
from skrl_marl_ext.models.maddpg_models import (
    QMLP,
    DeterministicMLP,
    action_encoding_size,
    joint_action_space,
)
from skrl_marl_ext.models.masked_categorical import ACTION_MASK_KEY, MaskedCategoricalMixin, mask_logits
from skrl_marl_ext.models.mlp import CategoricalMLP, GaussianMLP, ValueMLP, mlp
from skrl_marl_ext.models.rnn import CategoricalRNN, GaussianRNN, RecurrentCore, ValueRNN
from skrl_marl_ext.models.sac_models import SquashedGaussianMixin, SquashedGaussianMLP

__all__ = [
    "ACTION_MASK_KEY",
    "CategoricalMLP",
    "CategoricalRNN",
    "DeterministicMLP",
    "GaussianMLP",
    "GaussianRNN",
    "MaskedCategoricalMixin",
    "QMLP",
    "RecurrentCore",
    "SquashedGaussianMLP",
    "SquashedGaussianMixin",
    "ValueMLP",
    "ValueRNN",
    "action_encoding_size",
    "agent_id_space",
    "append_agent_id",
    "joint_action_space",
    "mask_logits",
    "mlp",
]
