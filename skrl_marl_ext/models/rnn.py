"""Ready-made recurrent models (GRU or LSTM, then an MLP head) in skrl's RNN convention.

skrl's recurrent agents (``PPO_RNN``) and this package's MAPPO and IPPO drive a recurrent model the same way:

- the model declares ``get_specification()`` ->
  ``{"rnn": {"sequence_length": L, "sizes": [(num_layers, num_envs, hidden_size), ...]}}`` (one size per hidden
  tensor: one for a GRU, two for an LSTM's ``(h, c)``);
- it receives the hidden states in ``inputs["rnn"]`` and returns the new ones in ``outputs["rnn"]``;
- acting (the model in evaluation mode) feeds one step per row, ``(rows, size)`` with hidden ``(layers, rows, H)``;
- training feeds whole sequences: rows are ``L`` consecutive steps of one sequence after another, ``inputs["rnn"]``
  holds the hidden state stored at every step (the model starts each sequence from the first one) and
  ``inputs["terminated"]`` says after which steps the hidden state was reset while acting.

Our agents pass ``(layers, G * num_envs, H)`` hidden states for a group of ``G`` agents whatever ``num_envs`` the
specification names; skrl's single-agent ``PPO_RNN`` allocates from the specification, so set ``num_envs`` for it.

These models also run under ``torch.vmap``, so agents with models of their own run as one batched group
(:mod:`~skrl_marl_ext.groups.stacked`): there the core computes the cell equations (:func:`recurrent_sequence`), with
resets as a mask instead of cutting the sequences where episodes end.
"""

from __future__ import annotations

from typing import Literal

import gymnasium
import torch
from skrl.models.torch import DeterministicMixin, GaussianMixin, Model
from torch import nn
from torch.nn import functional as F

from skrl_marl_ext.groups.stacked import in_vmap
from skrl_marl_ext.models.masked_categorical import MaskedCategoricalMixin
from skrl_marl_ext.models.mlp import _input_size, mlp

CELLS = {"gru": nn.GRU, "lstm": nn.LSTM}


def recurrent_sequence(
    *,
    cell: Literal["gru", "lstm"],
    x: torch.Tensor,
    hidden: list[torch.Tensor],
    weights: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]],
    keep: torch.Tensor | None = None,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """``nn.GRU`` / ``nn.LSTM`` (batch first, one direction) as the cell equations of their torch documentation, one
    step after another, in plain tensor operations: ``torch.vmap`` batches them (torch has no batching rule for
    ``aten::gru`` / ``aten::lstm``), and no control flow depends on the data.

    :param cell: ``"gru"`` or ``"lstm"``.
    :param x: ``(S, L, input_size)``: ``S`` sequences of ``L`` steps.
    :param hidden: The hidden states entering the first step, ``[h]`` (GRU) or ``[h, c]`` (LSTM), each ``(layers, S,
        H)``.
    :param weights: ``(weight_ih, weight_hh, bias_ih, bias_hh)`` of each layer as the torch module holds them (the
        gates ``r, z, n`` or ``i, f, g, o`` stacked along the rows).
    :param keep: ``(S, L)``, 0 after a step where the hidden state is reset (an episode ended) and 1 elsewhere: the
        hidden states entering step ``t + 1`` are multiplied by ``keep[:, t]``. None: no resets.
    :return: ``(outputs (S, L, H) of the last layer, hidden states after the last step)``, the latter not reset by
        ``keep``: what the torch module returns for each piece between resets.
    """
    S, L, _ = x.shape
    if len(hidden) != (2 if cell == "lstm" else 1) or any(tuple(h.shape[:2]) != (len(weights), S) for h in hidden):
        shapes = [tuple(h.shape) for h in hidden]
        raise ValueError(
            f"recurrent_sequence: {cell} hidden states {shapes} do not fit {len(weights)} layers of {S} rows"
        )
    if keep is not None and tuple(keep.shape) != (S, L):
        raise ValueError(f"recurrent_sequence: keep must be (S, L) = {(S, L)}, got {tuple(keep.shape)}")
    last: list[list[torch.Tensor]] = [[] for _ in hidden]
    for layer, (weight_ih, weight_hh, bias_ih, bias_hh) in enumerate(weights):
        h = hidden[0][layer]
        c = hidden[1][layer] if cell == "lstm" else None
        inputs = F.linear(x, weight_ih, bias_ih).unbind(1)  # every step's input term at once
        outputs = []
        for t in range(L):
            if t and keep is not None:
                h = h * keep[:, t - 1 : t]
                c = c * keep[:, t - 1 : t] if c is not None else None
            recurrent = F.linear(h, weight_hh, bias_hh)
            if cell == "gru":
                x_r, x_z, x_n = inputs[t].chunk(3, dim=-1)
                h_r, h_z, h_n = recurrent.chunk(3, dim=-1)
                r, z = torch.sigmoid(x_r + h_r), torch.sigmoid(x_z + h_z)
                n = torch.tanh(x_n + r * h_n)
                h = n + z * (h - n)  # (1 - z) * n + z * h, as torch computes it
            else:
                i, f, g, o = (inputs[t] + recurrent).chunk(4, dim=-1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
            outputs.append(h)
        x = torch.stack(outputs, dim=1)  # the next layer's input
        last[0].append(h)
        if c is not None:
            last[1].append(c)
    return x, [torch.stack(states) for states in last]


class RecurrentCore(nn.Module):
    """A GRU or LSTM that runs skrl's two modes: one step per row (acting) or sequences of ``sequence_length``.

    Called by itself it runs its ``nn.GRU`` / ``nn.LSTM`` (torch's kernels); inside ``torch.vmap`` (a batched group,
    :mod:`~skrl_marl_ext.groups.stacked`) it runs :func:`recurrent_sequence` on the same parameters, which vmap
    batches. Both give the same results (tests/test_recurrent_batched.py); the parameters and their names are the
    module's either way, so checkpoints do not depend on the path.
    """

    def __init__(
        self,
        input_size: int,
        *,
        cell: Literal["gru", "lstm"] = "gru",
        hidden_size: int = 64,
        num_layers: int = 1,
        sequence_length: int = 16,
    ) -> None:
        super().__init__()
        if cell not in CELLS:
            raise ValueError(f"RecurrentCore: cell must be one of {sorted(CELLS)}, got {cell!r}")
        if sequence_length < 1 or hidden_size < 1 or num_layers < 1:
            raise ValueError("RecurrentCore: sequence_length, hidden_size and num_layers must be positive")
        self.cell, self.hidden_size, self.num_layers = cell, hidden_size, num_layers
        self.sequence_length = sequence_length
        self.rnn = CELLS[cell](input_size, hidden_size, num_layers=num_layers, batch_first=True)

    def specification(self, num_envs: int) -> dict:
        """skrl's ``{"rnn": {...}}`` specification for ``num_envs`` rows."""
        size = (self.num_layers, num_envs, self.hidden_size)
        return {"rnn": {"sequence_length": self.sequence_length, "sizes": [size] * (2 if self.cell == "lstm" else 1)}}

    def _pack(self, hidden: list[torch.Tensor]):
        return tuple(hidden) if self.cell == "lstm" else hidden[0]

    def _unpack(self, hidden) -> list[torch.Tensor]:
        return list(hidden) if self.cell == "lstm" else [hidden]

    def forward(
        self, x: torch.Tensor, hidden: list[torch.Tensor], terminated: torch.Tensor | None, *, sequences: bool
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """:return: ``(features (rows, hidden_size), new hidden states)``.

        :param sequences: Whether rows are whole sequences (training) rather than one step each (acting).
        """
        L = self.sequence_length if sequences else 1
        x = x.reshape(-1, L, x.shape[-1])  # (sequences, L, size)
        if sequences:  # each sequence starts from the hidden state stored at its first step
            hidden = [s.view(s.shape[0], -1, L, s.shape[-1])[:, :, 0].contiguous() for s in hidden]
        if in_vmap(x, *hidden, self.rnn.weight_ih_l0):  # a batched group: the cell equations, resets as a mask
            names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
            weights = [tuple(getattr(self.rnn, f"{n}_l{k}", None) for n in names) for k in range(self.num_layers)]
            keep = (~terminated.view(-1, L).bool()).to(x.dtype) if sequences and terminated is not None else None
            out, new = recurrent_sequence(cell=self.cell, x=x, hidden=hidden, weights=weights, keep=keep)
            return out.reshape(-1, out.shape[-1]), new
        if not sequences or terminated is None or not bool(terminated.any()):
            out, new = self.rnn(x, self._pack(hidden))
            return out.reshape(-1, out.shape[-1]), self._unpack(new)
        # the hidden state was reset after the steps where an episode ended: run the pieces between such steps
        ended = terminated.view(-1, L).bool()
        cuts = [0, *(ended[:, :-1].any(dim=0).nonzero().flatten() + 1).tolist(), L]
        outs = []
        for start, stop in zip(cuts[:-1], cuts[1:], strict=False):
            out, new = self.rnn(x[:, start:stop], self._pack(hidden))
            keep = (~ended[:, stop - 1]).to(out.dtype).view(1, -1, 1)
            hidden = [s * keep.to(s.dtype) for s in self._unpack(new)]
            outs.append(out)
        out = torch.cat(outs, dim=1)
        return out.reshape(-1, out.shape[-1]), self._unpack(new)


class _Recurrent:
    """What the three recurrent models share: the core, skrl's specification, the call of the core."""

    def _build(self, input: str, num_envs: int, cell: str, hidden_size: int, num_layers: int, sequence_length: int):
        self.input, self.num_envs = input, num_envs
        self.core = RecurrentCore(
            _input_size(self, input),
            cell=cell,
            hidden_size=hidden_size,
            num_layers=num_layers,
            sequence_length=sequence_length,
        )

    def get_specification(self) -> dict:
        return self.core.specification(self.num_envs)

    def _features(self, inputs: dict) -> tuple[torch.Tensor, dict]:
        x, hidden = inputs[self.input], inputs.get("rnn")
        if hidden is None:  # a call outside the RNN convention (e.g. skrl's init_state_dict): one step from zeros
            spec = self.core.specification(x.shape[0])["rnn"]["sizes"]
            hidden = [torch.zeros(size, device=x.device, dtype=x.dtype) for size in spec]
            features, hidden = self.core(x, hidden, None, sequences=False)
        else:
            features, hidden = self.core(x, hidden, inputs.get("terminated"), sequences=self.training)
        return features, {"rnn": hidden}


class GaussianRNN(_Recurrent, GaussianMixin, Model):
    def __init__(
        self,
        *,
        observation_space: gymnasium.Space,
        action_space: gymnasium.Space,
        state_space: gymnasium.Space | None = None,
        device: str | torch.device | None = None,
        cell: Literal["gru", "lstm"] = "gru",
        hidden_size: int = 64,
        num_layers: int = 1,
        sequence_length: int = 16,
        num_envs: int = 1,
        hidden_sizes=(64,),
        activation: str = "tanh",
        initial_log_std: float = 0.0,
        input: Literal["observations", "states"] = "observations",
        clip_actions: bool = False,
    ) -> None:
        """Gaussian policy: a GRU/LSTM over the input, an MLP head for the mean, a parameter for the log std.

        :param num_envs: Rows of the hidden state in the specification (read by skrl's own agents, not ours).
        """
        Model.__init__(
            self, observation_space=observation_space, state_space=state_space, action_space=action_space, device=device
        )
        GaussianMixin.__init__(self, clip_actions=clip_actions)
        self._build(input, num_envs, cell, hidden_size, num_layers, sequence_length)
        self.net = mlp(hidden_size, self.num_actions, hidden_sizes, activation)
        self.log_std_parameter = nn.Parameter(torch.full((self.num_actions,), float(initial_log_std)))

    def compute(self, inputs, role=""):
        features, outputs = self._features(inputs)
        return self.net(features), {"log_std": self.log_std_parameter, **outputs}


class CategoricalRNN(_Recurrent, MaskedCategoricalMixin, Model):
    def __init__(
        self,
        *,
        observation_space: gymnasium.Space,
        action_space: gymnasium.Space,
        state_space: gymnasium.Space | None = None,
        device: str | torch.device | None = None,
        cell: Literal["gru", "lstm"] = "gru",
        hidden_size: int = 64,
        num_layers: int = 1,
        sequence_length: int = 16,
        num_envs: int = 1,
        hidden_sizes=(64,),
        activation: str = "tanh",
        input: Literal["observations", "states"] = "observations",
    ) -> None:
        """Categorical policy over ``Discrete(n)`` actions (honouring action masks): a GRU/LSTM, an MLP head."""
        Model.__init__(
            self, observation_space=observation_space, state_space=state_space, action_space=action_space, device=device
        )
        MaskedCategoricalMixin.__init__(self)
        self._build(input, num_envs, cell, hidden_size, num_layers, sequence_length)
        self.net = mlp(hidden_size, int(action_space.n), hidden_sizes, activation)

    def compute(self, inputs, role=""):
        features, outputs = self._features(inputs)
        return self.net(features), outputs


class ValueRNN(_Recurrent, DeterministicMixin, Model):
    def __init__(
        self,
        *,
        observation_space: gymnasium.Space | None = None,
        action_space: gymnasium.Space | None = None,
        state_space: gymnasium.Space | None = None,
        device: str | torch.device | None = None,
        cell: Literal["gru", "lstm"] = "gru",
        hidden_size: int = 64,
        num_layers: int = 1,
        sequence_length: int = 16,
        num_envs: int = 1,
        hidden_sizes=(64,),
        activation: str = "tanh",
        input: Literal["observations", "states"] = "states",
    ) -> None:
        """Value model: a GRU/LSTM, an MLP head with one output. MAPPO's critic reads ``"states"``."""
        Model.__init__(
            self, observation_space=observation_space, state_space=state_space, action_space=action_space, device=device
        )
        DeterministicMixin.__init__(self)
        self._build(input, num_envs, cell, hidden_size, num_layers, sequence_length)
        self.net = mlp(hidden_size, 1, hidden_sizes, activation)

    def compute(self, inputs, role=""):
        features, outputs = self._features(inputs)
        return self.net(features), outputs
