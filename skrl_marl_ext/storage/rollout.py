"""The on-policy rollout of one agent group: allocation, step writes, the non-finite check, and the rollout as the
update's mini-batches read it.

A :class:`RolloutBuffer` preallocates every tensor of a rollout as ``(T, rows, N, width)``: ``T`` steps, ``rows`` the
group's ``G`` agents (1 for a state the whole group shares), ``N`` envs. The agent writes one step at a time from
``record_transition`` (acting writes nothing). For the update, :meth:`TrainingData.from_rollout` packs it per agent as
``(G, T * N, width)`` (sample ``i`` is step ``i // N``, env ``i % N``, the order of skrl's memories),
:func:`mini_batch_indexes` gives the sample indexes of each mini-batch (whole sequences for recurrent models) and
:meth:`TrainingData.batch` one mini-batch ``(G, B, width)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence

import torch

from skrl_marl_ext.storage.non_finite import FIX, first_non_finite, skip_non_finite_

Spec = tuple[int, int, torch.dtype]
"""``(rows, width, dtype)`` of one rollout tensor."""

RESET_KEY = "rnn_reset"
"""Rollout entry of recurrent models: whether the hidden state was reset after the step (episode end or masked agent);
their hidden states are the entries ``rnn_<role>_<i>``."""

CHECKED = ("observations", "states", "rewards", "actions", "log_prob", "values", "final_values")
"""The tensors scanned for NaN/inf before an update: inputs first, then what was computed from them (a NaN
observation makes the action and, through the env, the team's rewards non-finite too)."""


class RolloutBuffer:
    def __init__(
        self,
        specs: dict[str, Spec],
        *,
        rollouts: int,
        num_envs: int,
        device: torch.device | str,
        sequence_length: int = 1,
    ) -> None:
        """Zeroed ``(rollouts, rows, num_envs, width)`` tensors, one per entry of ``specs``.

        :param specs: ``{name: (rows, width, dtype)}``.
        :param rollouts: Steps per rollout ``T``.
        :param num_envs: Envs per step ``N``.
        :param device: Device of the tensors.
        :param sequence_length: Steps per training sequence of recurrent models (1: none).
        """
        self.rollouts, self.num_envs, self.sequence_length, self.device = rollouts, num_envs, sequence_length, device
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

    def mini_batch_indexes(self, mini_batches: int, *, shuffle: bool) -> Iterator[torch.Tensor]:
        """One epoch's mini-batches of the rollout's samples (:func:`mini_batch_indexes`; recurrent: whole sequences)."""
        T, N, L = self.rollouts, self.num_envs, self.sequence_length
        return mini_batch_indexes(T, N, mini_batches, sequence_length=L, device=self.device, shuffle=shuffle)

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
    rollouts: int,
    num_envs: int,
    mini_batches: int,
    *,
    sequence_length: int = 1,
    device: torch.device | str,
    shuffle: bool = True,
) -> Iterator[torch.Tensor]:
    """The sample indexes of one epoch's mini-batches of a rollout (sample ``i``: step ``i // num_envs``, env
    ``i % num_envs``). Each env's steps are cut into ``rollouts // sequence_length`` sequences of consecutive steps
    (recurrent models replay whole sequences; 1: every sample its own), split as ``np.array_split`` splits them (as
    skrl's memories split; ``Tensor.chunk`` may give fewer mini-batches): in random order with ``shuffle``, else in
    order, i.e. contiguous blocks of steps, the same every epoch (skrl 2.1.1's ``Memory.sample_all``). A mini-batch
    holds its sequences' ``sequence_length`` steps one sequence after another."""
    L = sequence_length
    chunk = torch.arange(rollouts // L, device=device).view(-1, 1, 1)
    env = torch.arange(num_envs, device=device).view(1, -1, 1)
    step = torch.arange(L, device=device).view(1, 1, -1)
    sequences = ((chunk * L + step) * num_envs + env).reshape(-1, L)
    count = sequences.shape[0]
    order = torch.randperm(count, device=device) if shuffle else torch.arange(count, device=device)
    for part in torch.tensor_split(order, mini_batches):
        yield sequences[part].reshape(-1)


@dataclasses.dataclass
class TrainingData:
    """A group's rollout as the mini-batches read it: the raw inputs where the rollout keeps them (a state the group
    shares, once), gathered and preprocessed by each mini-batch; every other float tensor packed into one ``(G, T * N,
    width)`` tensor (one gather per mini-batch); masks."""

    packed: torch.Tensor
    names: list[str]
    widths: list[int]
    mask: torch.Tensor | None
    """``(G, T * N, 1)`` agent mask, or None when every sample counts (then every mean is a plain mean)."""
    action_mask: torch.Tensor | None
    inputs: dict[str, torch.Tensor]
    """The rollout's raw ``observations`` ``(T, G, N, size)`` and ``states`` ``(T, G or 1, N, size)``, not copied."""
    model_inputs: Callable[[torch.Tensor, torch.Tensor | None], tuple[torch.Tensor, torch.Tensor | None]]
    """Raw ``(G, B, size)`` observations and ``(G or 1, B, size)`` states to the models' inputs ``(G, B, ...)``,
    preprocessed with the statistics the update refreshed. They stay fixed through the epochs and preprocessing is
    elementwise, so a mini-batch gets what preprocessing the whole rollout once would give it."""
    flags: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    """Recurrent models: ``(G, T * N, 1)`` bool hidden-state resets and truncations."""

    @classmethod
    def from_rollout(
        cls,
        rollout: RolloutBuffer,
        *,
        advantages: torch.Tensor,
        returns: torch.Tensor,
        model_inputs: Callable,
        action_mask: bool,
    ) -> TrainingData:
        """Pack ``rollout`` per agent: its actions, log-probabilities and values, ``advantages`` and ``returns``
        (``(T, G, N, 1)``) and, of recurrent models, the stored hidden states (their resets and truncations as flags);
        the agent mask (None where every sample counts: one host read), the action mask with ``action_mask``."""
        G, TN = rollout["actions"].shape[1], rollout.rollouts * rollout.num_envs
        floats = {
            "actions": rollout.flat("actions"),
            "log_prob": rollout.flat("log_prob"),
            "values": rollout.flat("values"),
            "returns": returns.transpose(0, 1).reshape(G, TN, 1),
            "advantages": advantages.transpose(0, 1).reshape(G, TN, 1),
        }
        flags = {}
        if RESET_KEY in rollout:  # recurrent: each step's stored hidden states, resets, truncations
            floats.update({name: rollout.flat(name) for name in rollout.tensors if name.startswith("rnn_")})
            del floats[RESET_KEY]
            flags = {RESET_KEY: rollout.flat(RESET_KEY), "truncated": rollout.flat("truncated")}
        return cls(
            packed=torch.cat([v.float() for v in floats.values()], dim=-1),
            names=list(floats),
            widths=[v.shape[-1] for v in floats.values()],
            mask=None if bool(rollout["agent_mask"].all()) else rollout.flat("agent_mask"),
            action_mask=rollout.flat("action_mask") if action_mask else None,
            inputs={name: rollout[name] for name in ("observations", "states") if name in rollout},
            model_inputs=model_inputs,
            flags=flags,
        )

    def column(self, name: str) -> torch.Tensor:
        """Every sample of the packed tensor ``name``, ``(G, T * N, width)``."""
        start = sum(self.widths[: self.names.index(name)])
        return self.packed[..., start : start + self.widths[self.names.index(name)]]

    def batch(self, indexes: torch.Tensor) -> dict[str, torch.Tensor | None]:
        """The samples ``indexes`` (sample ``i``: step ``i // N``, env ``i % N``) of every tensor, ``(G, B, width)``;
        a state the group shares is a view expanded to its agents (unless agent ids are appended)."""
        batch = dict(zip(self.names, self.packed[:, indexes].split(self.widths, dim=-1), strict=True))
        batch["mask"] = self.mask[:, indexes] if self.mask is not None else None
        batch["action_mask"] = self.action_mask[:, indexes] if self.action_mask is not None else None
        N = self.inputs["observations"].shape[2]
        steps, envs = indexes.div(N, rounding_mode="floor"), indexes.remainder(N)
        raw = {name: x.transpose(0, 1)[:, steps, envs] for name, x in self.inputs.items()}  # (G or 1, B, size)
        obs, states = self.model_inputs(raw["observations"], raw.get("states"))
        batch["observations"] = obs
        # contiguous: models may .view() their inputs; a state shared by the group stays an expanded view
        batch["states"] = states if states is None or states.stride(0) == 0 else states.contiguous()
        batch.update({name: flag[:, indexes] for name, flag in self.flags.items()})
        return batch
