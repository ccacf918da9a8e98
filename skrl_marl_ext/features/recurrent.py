"""Recurrent models in MAPPO and IPPO: skrl's RNN convention, hidden states per group, sequence mini-batches.

A model is recurrent when ``get_specification()`` returns ``{"rnn": {"sequence_length": L, "sizes": [...]}}``
(skrl's ``PPO_RNN`` convention; see :mod:`skrl_marl_ext.models.rnn`). For a group of ``G`` agents:

- each recurrent role has hidden states ``(layers, G * num_envs, H)`` (agent-major rows, as the group's inputs), fed
  as ``inputs["rnn"]`` and replaced by the model's ``outputs["rnn"]`` after every step; a model in both roles has one;
- after a step, the rows of agents whose episode ended (terminated or truncated) or that were masked are zeroed;
- the rollout stores the hidden state each step *started* from, and whether the hidden state was reset after it;
- the update cuts every env's rollout into sequences of ``L`` steps and draws mini-batches of whole sequences; each
  starts from its stored hidden state, and ``inputs["terminated"]`` carries the resets, so the model replays what
  acting did (the first mini-batch's ratio is exactly 1 without input preprocessors).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from skrl_marl_ext.features.masks import agent_mask
from skrl_marl_ext.groups.stacked import batching_failure, stack_signature
from skrl_marl_ext.keys import AGENT_MASK_KEY
from skrl_marl_ext.storage.rollout import RESET_KEY


def rnn_specification(owner: str, what: str, model: Any) -> tuple[int, list[tuple[int, int]]] | None:
    """``(sequence_length, [(layers, hidden_size) per hidden tensor])`` of a recurrent skrl model, else None.

    :raises ValueError: On a malformed specification (naming the model and the expected form).
    """
    get = getattr(model, "get_specification", None)
    spec = get() if callable(get) else {}
    rnn = spec.get("rnn") if isinstance(spec, dict) else None
    if not rnn or not rnn.get("sizes"):
        return None
    form = '{"rnn": {"sequence_length": L, "sizes": [(num_layers, num_envs, hidden_size), ...]}}'
    try:
        length = int(rnn.get("sequence_length", 1))
        sizes = [(int(layers), int(hidden)) for layers, _, hidden in rnn["sizes"]]
    except (TypeError, ValueError):
        raise ValueError(f"{owner}: {what}.get_specification() must return {form}; got {spec!r}") from None
    if length < 1 or any(layers < 1 or hidden < 1 for layers, hidden in sizes):
        raise ValueError(f"{owner}: {what}.get_specification() has non-positive sizes or sequence_length: {spec!r}")
    return length, sizes


def is_recurrent(model: Any) -> bool:
    get = getattr(model, "get_specification", None)
    spec = get() if callable(get) else {}
    return bool(isinstance(spec, dict) and (spec.get("rnn") or {}).get("sizes"))


def batching_dry_runs(
    sizes: list[tuple[int, int]], *, sequence_length: int, widths: dict[str, int | None], device: torch.device | str
) -> list[tuple[bool, dict[str, Any]]]:
    """``(training, inputs)`` of the dry runs that tell whether two agents' recurrent models run as one vmapped call
    (:func:`~skrl_marl_ext.groups.stacked.batching_failure`), in a batched group's layout: one acting step (evaluation
    mode) and one training sequence of ``L`` steps, reset after its first step, from zero hidden states.

    :param sizes: ``[(layers, hidden_size)]`` of the model's hidden states (:func:`rnn_specification`).
    :param widths: ``{input name: features per row}`` (``"observations"``, ``"states"``; None: the input is None).
    """
    runs = []
    for training, rows in ((False, 1), (True, sequence_length)):
        inputs = {k: torch.zeros(2, rows, w, device=device) if w else None for k, w in widths.items()}
        inputs["rnn"] = [torch.zeros(layers, 2 * rows, hidden, device=device) for layers, hidden in sizes]
        if training:
            inputs["terminated"] = torch.zeros(2, rows, 1, dtype=torch.bool, device=device)
            inputs["terminated"][:, 0] = True
            inputs["truncated"] = torch.zeros_like(inputs["terminated"])
        runs.append((training, inputs))
    return runs


class RecurrentState:
    """The hidden states of one group's recurrent roles (see the module docstring)."""

    def __init__(self, sizes: dict[str, list[tuple[int, int]]], *, sequence_length: int, shared: bool) -> None:
        """:param sizes: ``{role: [(layers, hidden_size), ...]}`` of the recurrent roles.
        :param shared: Whether policy and value are one model (one hidden state, the policy's).
        """
        self.sizes, self.sequence_length, self.shared = sizes, sequence_length, shared
        self.current: dict[str, list[torch.Tensor]] | None = None

    @property
    def roles(self) -> list[str]:
        """Roles with hidden states of their own (a model in both roles: the policy only)."""
        return ["policy"] if self.shared else list(self.sizes)

    def ensure(self, rows: int, device: torch.device | str) -> None:
        """Zero hidden states ``(layers, rows, H)`` when there are none or the number of rows changed."""
        if self.current is not None and all(h.shape[1] == rows for hs in self.current.values() for h in hs):
            return
        self.current = {
            role: [torch.zeros(layers, rows, hidden, device=device) for layers, hidden in self.sizes[role]]
            for role in self.roles
        }
        if self.shared:
            self.current["value"] = self.current["policy"]

    def inputs(self, role: str) -> dict[str, Any]:
        """``{"rnn": hidden states}`` for ``role``, or nothing when its model is not recurrent."""
        return {"rnn": self.current[role]} if role in self.sizes else {}

    def advance(self, new: dict[str, list[torch.Tensor] | None], reset: torch.Tensor) -> None:
        """Take the models' new hidden states (fp32), zeroing the rows where ``reset`` ``(rows,)`` is True."""
        keep = (~reset).float().view(1, -1, 1)
        for role in self.roles:
            if new.get(role) is not None:
                self.current[role] = [h.float() * keep for h in new[role]]
        if self.shared:
            self.current["value"] = self.current["policy"]

    # ------------------------------------------------------------------ storage

    def specs(self, group_size: int) -> dict[str, tuple[int, int, torch.dtype]]:
        """Rollout entries: the hidden states each step started from, ``(G, layers * H)`` per tensor, and resets."""
        specs = {
            f"rnn_{role}_{i}": (group_size, layers * hidden, torch.float32)
            for role in self.roles
            for i, (layers, hidden) in enumerate(self.sizes[role])
        }
        specs[RESET_KEY] = (group_size, 1, torch.bool)
        return specs

    def stored(self, hidden: dict[str, list[torch.Tensor]], group_size: int) -> dict[str, torch.Tensor]:
        """The hidden states ``(layers, G * n, H)`` as rollout entries ``(G, n, layers * H)``."""
        entries = {}
        for role in self.roles:
            for i, h in enumerate(hidden[role]):
                layers, rows, size = h.shape
                entries[f"rnn_{role}_{i}"] = h.view(layers, group_size, rows // group_size, size).permute(1, 2, 0, 3)
        return entries

    def batch_inputs(self, batch: dict[str, torch.Tensor], role: str) -> dict[str, Any]:
        """``{"rnn": [(layers, G * B, H)], "terminated", "truncated" (G, B, 1)}`` of a mini-batch ``(G, B, ...)`` for
        ``role`` (nothing when its model is not recurrent)."""
        if role not in self.sizes:
            return {}
        source = "policy" if self.shared else role
        hidden = []
        for i, (layers, size) in enumerate(self.sizes[source]):
            x = batch[f"rnn_{source}_{i}"]
            hidden.append(x.reshape(-1, layers, size).transpose(0, 1).contiguous())
        return {
            "rnn": hidden,
            "terminated": batch[RESET_KEY],
            "truncated": batch["truncated"],
        }


def models_batch(
    owner: str, models: dict[str, Any], *, widths: dict[str, int | None], device: Any, failures: dict, uid: str
) -> bool:
    """Whether agent ``uid``'s recurrent ``models`` (by role; any that are) run under ``torch.vmap``, as a batched
    group runs them: a dry run on zeros, acting and training (:func:`~skrl_marl_ext.groups.stacked.batching_failure`),
    once per kind of model, kept in ``failures`` (``{(role, kind): (uid, reason or None)}``). Ours do
    (:mod:`~skrl_marl_ext.models.rnn`); a model that calls ``nn.GRU``/``nn.LSTM`` (no batching rule) or branches on its
    inputs does not: its agents run one by one.

    :param widths: ``{input name: features per row}`` (``"observations"``, ``"states"``; None: the input is None).
    """
    for role, model in models.items():
        spec = rnn_specification(owner, f"the {role} model of agent '{uid}'", model)
        if spec is None:
            continue
        key = (role, stack_signature(model) or id(model))
        if key not in failures:
            runs = batching_dry_runs(spec[1], sequence_length=spec[0], widths=widths, device=device)
            failures[key] = (uid, batching_failure(model, role, runs))
        if failures[key][1]:
            return False
    return True


def warn_unbatched(owner: str, failures: dict, models: dict[str, dict[str, Any]]) -> None:
    """One warning per kind of recurrent model that cannot run under ``torch.vmap`` (``failures`` of
    :func:`models_batch`), naming an agent, the model and the reason: for ``cfg.batch_agent_models=True``."""
    for (role, _), (uid, failure) in failures.items():
        if failure:
            model = models[uid][role]
            warnings.warn(
                f"{owner}: cfg.batch_agent_models is True, but the recurrent {role} model of agent "
                f"'{uid}' ({type(model).__name__}) cannot run under torch.vmap ({failure.splitlines()[0]}); the "
                "agents with such models run one by one. A recurrent model batches when no control flow depends "
                "on its inputs (e.g. `if terminated.any()`) and vmap has a batching rule for each of its ops (not "
                "for nn.GRU/nn.LSTM), as skrl_marl_ext.models' GaussianRNN, CategoricalRNN and ValueRNN",
                stacklevel=4,
            )


def recurrent_state(owner: str, group: Any, *, roles: tuple[str, ...], rollouts: int) -> RecurrentState | None:
    """The group's hidden-state keeper when its policy or value model is recurrent (skrl's RNN convention).

    :raises ValueError: When the two models name different sequence lengths, or ``rollouts`` is not a multiple of the
        sequence length (every env's rollout is cut into whole sequences).
    """
    specs = {}
    for role in roles:
        spec = rnn_specification(owner, f"the {role} model of agents {group.uids}", group.models[role])
        if spec is not None:
            specs[role] = spec
    if not specs:
        return None
    lengths = {role: length for role, (length, _) in specs.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(
            f"{owner}: the recurrent models of agents {group.uids} name different sequence lengths {lengths}; "
            "mini-batches are whole sequences of one length: give both models the same sequence_length"
        )
    length = next(iter(lengths.values()))
    if rollouts % length:
        raise ValueError(
            f"{owner}: cfg.rollouts ({rollouts}) is not a multiple of the sequence_length ({length}) of the "
            f"recurrent models of agents {group.uids}; every env's rollout is cut into whole sequences. Set "
            f"rollouts to a multiple of {length} (e.g. {length * max(1, round(rollouts / length))})"
        )
    shared = group.models["policy"] is group.models["value"]
    return RecurrentState({r: sizes for r, (_, sizes) in specs.items()}, sequence_length=length, shared=shared)


def advance_hidden_states(
    groups: list,
    next_hidden: dict[int, dict],
    *,
    observations: dict,
    terminated: dict,
    truncated: dict,
    infos: dict,
    record_step: int | None,
    device: Any,
) -> None:
    """Move the hidden states of the groups in ``next_hidden`` (``{group index: the models' new hidden states}``,
    emptied here) on to them, zeroed for agents whose episode ended (terminated or truncated) or that were masked at
    the step; with ``record_step``, store in the group's rollout at that step where that happened."""
    for index, new in list(next_hidden.items()):
        group = groups[index]
        num_envs = next(iter(group.recurrent.current.values()))[0].shape[1] // group.size
        ended = group.stack(terminated).bool() | group.stack(truncated).bool()
        alive = agent_mask(group, observations, infos.get(AGENT_MASK_KEY), num_envs, device)
        reset = ended.view(group.size, num_envs, 1) | ~alive
        if record_step is not None and group.rollout is not None:
            group.rollout.write(record_step, **{RESET_KEY: reset})
        group.recurrent.advance(new, reset.view(-1))
    next_hidden.clear()
