"""GRU and LSTM models as skrl's documentation describes them for ``PPO_RNN`` (not a test module).

Written from the description in skrl's docs ("Recurrent models": ``get_specification()`` with ``"rnn"`` sizes
``(num_layers, num_envs, hidden_size)``, ``inputs["rnn"]`` in, ``outputs["rnn"]`` out, ``inputs["terminated"]`` only in
training) and the shape of its GRU/LSTM model snippets: in training the input rows are sequences of
``sequence_length`` steps, the hidden states of all their steps arrive and the first of each sequence is taken, and
the sequence is run in pieces split after the steps where any sequence terminated, zeroing the hidden state of those
that did. They are used unchanged with this package's MAPPO and IPPO (tests/test_recurrent.py).
"""

from __future__ import annotations

import torch
from skrl.models.torch import DeterministicMixin, GaussianMixin, Model
from torch import nn


class _DocRNN(Model):
    """The recurrent part of the docs' models: ``self.rnn`` is an ``nn.GRU`` or ``nn.LSTM`` (batch first)."""

    lstm = False

    def _setup_rnn(self, input_size, num_envs, num_layers, hidden_size, sequence_length):
        self.num_envs, self.num_layers = num_envs, num_layers
        self.hidden_size, self.sequence_length = hidden_size, sequence_length
        cls = nn.LSTM if self.lstm else nn.GRU
        self.rnn = cls(input_size=input_size, hidden_size=hidden_size, num_layers=num_layers, batch_first=True)

    def get_specification(self):
        size = (self.num_layers, self.num_envs, self.hidden_size)  # (D * num_layers, N, Hout)
        return {"rnn": {"sequence_length": self.sequence_length, "sizes": [size, size] if self.lstm else [size]}}

    def _run(self, x, hidden):
        states = tuple(hidden) if self.lstm else hidden[0]
        out, states = self.rnn(x, states)
        return out, list(states) if self.lstm else [states]

    def recurrent(self, inputs, key):
        x = inputs[key]
        terminated = inputs.get("terminated", None)
        hidden = list(inputs["rnn"])
        if self.training:
            L = self.sequence_length
            x = x.view(-1, L, x.shape[-1])  # (N, L, Hin)
            # the states stored at the first step of each sequence
            hidden = [h.view(self.num_layers, -1, L, h.shape[-1])[:, :, 0, :].contiguous() for h in hidden]
            if terminated is not None and torch.any(terminated):
                terminated = terminated.view(-1, L)
                cuts = [0] + (terminated[:, :-1].any(dim=0).nonzero(as_tuple=True)[0] + 1).tolist() + [L]
                outputs = []
                for i0, i1 in zip(cuts[:-1], cuts[1:], strict=True):
                    out, hidden = self._run(x[:, i0:i1, :], hidden)
                    for h in hidden:
                        h[:, terminated[:, i1 - 1], :] = 0
                    outputs.append(out)
                out = torch.cat(outputs, dim=1)
            else:
                out, hidden = self._run(x, hidden)
        else:  # rollout: one step per row
            out, hidden = self._run(x.view(-1, 1, x.shape[-1]), hidden)
        return torch.flatten(out, start_dim=0, end_dim=1), hidden


class DocGaussianRNN(GaussianMixin, _DocRNN):
    def __init__(
        self,
        observation_space,
        state_space,
        action_space,
        device,
        *,
        lstm=False,
        num_envs=1,
        num_layers=1,
        hidden_size=16,
        sequence_length=4,
    ):
        Model.__init__(
            self, observation_space=observation_space, state_space=state_space, action_space=action_space, device=device
        )
        GaussianMixin.__init__(self, clip_actions=False, clip_log_std=True, min_log_std=-20, max_log_std=2)
        self.lstm = lstm
        self._setup_rnn(self.num_observations, num_envs, num_layers, hidden_size, sequence_length)
        self.net = nn.Sequential(nn.Linear(hidden_size, 16), nn.ReLU(), nn.Linear(16, self.num_actions), nn.Tanh())
        self.log_std_parameter = nn.Parameter(torch.zeros(self.num_actions))

    def compute(self, inputs, role):
        features, hidden = self.recurrent(inputs, "observations")
        return self.net(features), {"log_std": self.log_std_parameter, "rnn": hidden}


class DocValueRNN(DeterministicMixin, _DocRNN):
    def __init__(
        self,
        observation_space,
        state_space,
        action_space,
        device,
        *,
        lstm=False,
        num_envs=1,
        num_layers=1,
        hidden_size=16,
        sequence_length=4,
    ):
        Model.__init__(
            self, observation_space=observation_space, state_space=state_space, action_space=action_space, device=device
        )
        DeterministicMixin.__init__(self, clip_actions=False)
        self.lstm = lstm
        self._setup_rnn(self.num_states, num_envs, num_layers, hidden_size, sequence_length)
        self.net = nn.Sequential(nn.Linear(hidden_size, 16), nn.ReLU(), nn.Linear(16, 1))

    def compute(self, inputs, role):
        features, hidden = self.recurrent(inputs, "states")
        return self.net(features), {"rnn": hidden}
