"""Our :class:`ValueNorm` and the value path of MAPPO, term by term against the MAPPO paper's code.

The reference is a port of ``ValueNorm`` from ``marlbenchmark/on-policy`` (``onpolicy/utils/valuenorm.py``), checked
numerically against ours on the same data: the statistics after a sequence of updates (masked ones against the
reference on the unmasked rows), the empty statistics, normalize/denormalize; then, driving MAPPO on the spread env
and recording the arguments of ``compute_gae`` and ``ppo_loss`` at their call sites, that GAE gets the critic's
outputs (bootstrap and time-limit values included) denormalised and the loss gets the returns normalised, as the
reference computes them from the same rollout. The findings are tabled in ``docs/value_normalization.md``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import QUIET, drive, make_agent, one_thread, spread  # noqa: F401
from torch import nn

from skrl_marl_ext import ValueNorm
from skrl_marl_ext.functional import value_loss


class ReferenceValueNorm(nn.Module):
    """``ValueNorm`` of ``marlbenchmark/on-policy``, ``onpolicy/utils/valuenorm.py``, copied term for term (float32
    statistics, ``norm_axes`` leading dimensions averaged); only the numpy conversions are left out."""

    def __init__(self, input_shape, norm_axes=1, beta=0.99999, per_element_update=False, epsilon=1e-5):
        super().__init__()
        self.input_shape = input_shape
        self.norm_axes = norm_axes
        self.epsilon = epsilon
        self.beta = beta
        self.per_element_update = per_element_update
        self.tpdv = dict(dtype=torch.float32, device="cpu")
        self.running_mean = nn.Parameter(torch.zeros(input_shape), requires_grad=False).to(**self.tpdv)
        self.running_mean_sq = nn.Parameter(torch.zeros(input_shape), requires_grad=False).to(**self.tpdv)
        self.debiasing_term = nn.Parameter(torch.tensor(0.0), requires_grad=False).to(**self.tpdv)

    def running_mean_var(self):
        debiased_mean = self.running_mean / self.debiasing_term.clamp(min=self.epsilon)
        debiased_mean_sq = self.running_mean_sq / self.debiasing_term.clamp(min=self.epsilon)
        debiased_var = (debiased_mean_sq - debiased_mean**2).clamp(min=1e-2)
        return debiased_mean, debiased_var

    @torch.no_grad()
    def update(self, input_vector):
        input_vector = input_vector.to(**self.tpdv)
        batch_mean = input_vector.mean(dim=tuple(range(self.norm_axes)))
        batch_sq_mean = (input_vector**2).mean(dim=tuple(range(self.norm_axes)))
        if self.per_element_update:
            batch_size = np.prod(input_vector.size()[: self.norm_axes])
            weight = self.beta**batch_size
        else:
            weight = self.beta
        self.running_mean.mul_(weight).add_(batch_mean * (1.0 - weight))
        self.running_mean_sq.mul_(weight).add_(batch_sq_mean * (1.0 - weight))
        self.debiasing_term.mul_(weight).add_(1.0 * (1.0 - weight))

    def normalize(self, input_vector):
        input_vector = input_vector.to(**self.tpdv)
        mean, var = self.running_mean_var()
        return (input_vector - mean[(None,) * self.norm_axes]) / torch.sqrt(var)[(None,) * self.norm_axes]

    def denormalize(self, input_vector):
        input_vector = input_vector.to(**self.tpdv)
        mean, var = self.running_mean_var()
        return input_vector * torch.sqrt(var)[(None,) * self.norm_axes] + mean[(None,) * self.norm_axes]


def close(actual, expected, tol=1e-5, atol=None):
    torch.testing.assert_close(actual.double(), expected.double(), rtol=tol, atol=tol if atol is None else atol)


def assert_same_buffers(mean, mean_sq, debiasing_term, ref: ReferenceValueNorm) -> None:
    """The raw running moments (of the order of ``1 - beta``: compared relatively) and the debiased mean and
    variance."""
    close(mean, ref.running_mean, atol=1e-12)
    close(mean_sq, ref.running_mean_sq, atol=1e-12)
    close(debiasing_term, ref.debiasing_term, atol=1e-12)
    debias = debiasing_term.clamp(min=ref.epsilon)
    mean, mean_sq = mean / debias, mean_sq / debias
    ref_mean, ref_var = ref.running_mean_var()
    close(mean, ref_mean)
    close((mean_sq - mean * mean).clamp(min=1e-2), ref_var)


def assert_same_statistics(ours: ValueNorm, ref: ReferenceValueNorm) -> None:
    assert_same_buffers(ours.running_mean, ours.running_mean_sq, ours.debiasing_term, ref)
    for a, b in zip(ours.mean_var(), ref.running_mean_var(), strict=True):
        close(a, b)


def batches(seed: int = 0):
    """Batches of several sizes and scales, shape ``(rows, 1)``: values as large as returns get."""
    generator = torch.Generator().manual_seed(seed)
    sizes, scales, shifts = [64, 7, 128, 1, 33, 256], [1.0, 5.0, 0.5, 2.0, 20.0, 3.0], [0.0, 3.0, -8.0, 1.0, 40.0, -2.0]
    return [torch.randn(n, 1, generator=generator) * s + m for n, s, m in zip(sizes, scales, shifts, strict=True)]


# ---------------------------------------------------------------- the normaliser alone


@pytest.mark.parametrize("beta", [0.99999, 0.9])
def test_statistics_normalize_and_denormalize_follow_the_reference_update_by_update(beta):
    ours, ref = ValueNorm(1, beta=beta), ReferenceValueNorm(1, beta=beta)
    probe = torch.linspace(-50.0, 50.0, 21).unsqueeze(-1)
    for x in [None, *batches()]:  # None: the empty statistics first
        if x is not None:
            ours.update(x)
            ref.update(x)
        assert_same_statistics(ours, ref)
        close(ours.normalize(probe), ref.normalize(probe))
        close(ours.denormalize(probe), ref.denormalize(probe))
        close(ours(probe, inverse=True), ref.denormalize(probe))  # skrl's preprocessor interface


def test_empty_statistics_and_the_first_update():
    """Before any update both give mean 0 and the variance floor 1e-2 (normalize is ``10 x``); the first update
    gives exactly the batch's mean and (biased) variance: the debiasing term ``1 - beta`` just reaches ``epsilon``."""
    ours, ref = ValueNorm(1), ReferenceValueNorm(1)
    x = torch.tensor([[1.0], [2.0], [6.0]])
    for norm in (ours, ref):
        close(norm.normalize(x), 10.0 * x)
        close(norm.denormalize(x), 0.1 * x)
    ours.update(x)
    ref.update(x)
    mean, var = torch.tensor([3.0]), x.var(unbiased=False).reshape(1)
    for m, v in (ours.mean_var(), ref.running_mean_var()):
        close(m, mean)
        close(v, var)
    # a constant batch: the variance floor, not 0
    ours, ref = ValueNorm(1), ReferenceValueNorm(1)
    ours.update(torch.full((4, 1), 2.5))
    ref.update(torch.full((4, 1), 2.5))
    assert_same_statistics(ours, ref)
    close(ours.mean_var()[1], torch.tensor([1e-2]))


def test_ours_is_the_reference_without_per_element_update():
    """The paper's MAPPO builds ``ValueNorm(1)``: ``per_element_update=False``, one ``beta`` step per update whatever
    the batch size. Ours has only that rule; the per-element one (``beta ** rows``) is a different normaliser."""
    ours, per_element = ValueNorm(1), ReferenceValueNorm(1, per_element_update=True)
    for x in batches(1):
        ours.update(x)
        per_element.update(x)
    assert not torch.allclose(ours.debiasing_term.float(), per_element.debiasing_term, rtol=1e-3)


def test_a_masked_update_is_the_reference_update_on_the_unmasked_rows():
    """Masked-out rows (which may hold NaN) are not data; a batch with no unmasked row leaves the statistics as they
    are (the reference cannot take an empty batch: its mean is NaN)."""
    ours, ref = ValueNorm(1), ReferenceValueNorm(1)
    generator = torch.Generator().manual_seed(3)
    for i, x in enumerate(batches(2)):
        mask = torch.rand(x.shape, generator=generator) < 0.6
        mask[0] = True  # at least one row
        if i == 3:
            mask[:] = False  # an agent masked for a whole rollout
        x = torch.where(mask, x, torch.nan)
        ours.update(x, mask)
        if mask.any():
            ref.update(x[mask].unsqueeze(-1))
        assert_same_statistics(ours, ref)


def test_an_agent_masked_for_a_whole_rollout_keeps_its_own_statistics():
    """A batched group keeps one ValueNorm per agent; an agent with no unmasked sample in a rollout keeps its
    statistics, while the other agents' fold in their returns (as per-agent references do)."""
    env = spread(num_envs=2)
    # each agent's own critic, batched: one group whose value statistics are stacked per agent
    agent = make_agent(env, cfg={"value_preprocessor": ValueNorm, "batch_agent_models": True, "experiment": QUIET})
    (group,) = agent.groups
    G = group.size
    refs = [ReferenceValueNorm(1) for _ in range(G)]
    returns = torch.randn(4, G, 2, 1) * 3.0 + 5.0
    first = torch.ones(4, G, 2, 1, dtype=torch.bool)
    second = first.clone()
    second[:, 0] = False  # agent 0 absent from the whole second rollout
    for mask in (first, second):
        group.update_statistics("value", returns, mask, agent_dim=1)
        for i, ref in enumerate(refs):
            if mask[:, i].any():
                ref.update(returns[:, i][mask[:, i]].unsqueeze(-1))
    stacked = group.value_preprocessor
    for i, ref in enumerate(refs):
        assert_same_buffers(stacked.running_mean[i], stacked.running_mean_sq[i], stacked.debiasing_term[i], ref)


# ---------------------------------------------------------------- the agent's value path


class Spy:
    """Records the outputs of a model's ``act`` (the raw critic outputs, normalised space)."""

    def __init__(self, monkeypatch, model):
        self.outputs, self.act = [], model.act
        monkeypatch.setattr(model, "act", self)

    def __call__(self, *args, **kwargs):
        result = self.act(*args, **kwargs)
        self.outputs.append(result[0].detach().clone())
        return result


def drive_and_record(monkeypatch, *, shared: bool, mini_batches: int, updates: int = 2):
    """MAPPO with ValueNorm, value clipping and the time-limit bootstrap on a spread env with agent masks and short
    episodes; returns, per update, the raw stored critic outputs, the GAE arguments/results and the loss arguments."""
    env = spread(num_envs=4, episode_length=3, agent_masks=True, seed=0)
    rollouts, epochs = 6, 2
    cfg = {
        "rollouts": rollouts,
        "learning_epochs": epochs,
        "mini_batches": mini_batches,
        "mini_batch_order": "sequential",
        "value_preprocessor": ValueNorm,
        "value_clip": 0.2,
        "time_limit_bootstrap": True,
        "batch_agent_models": True,  # per-agent critics as one batched group (shared critics: one group anyway)
        "experiment": QUIET,
    }
    agent = make_agent(env, shared=shared, cfg=cfg)
    (group,) = agent.groups
    spy = Spy(monkeypatch, group.value) if not group.stacked else None
    records, gae, loss = [], agent.compute_gae, agent.ppo_loss

    def record_gae(**kwargs):
        b = group.rollout.tensors
        stored = {k: b[k].clone() for k in ("values", "final_values", "truncated", "agent_mask")}
        stored["last"] = spy.outputs[-1].view(1, group.size, -1, 1) if spy is not None else None
        advantages, returns = gae(**kwargs)
        records.append({"stored": stored, "gae": kwargs, "returns": returns.clone(), "losses": []})
        return advantages, returns

    def record_loss(**kwargs):
        records[-1]["losses"].append({k: v.detach().clone() for k, v in kwargs.items() if torch.is_tensor(v)})
        return loss(**kwargs)

    monkeypatch.setattr(agent, "compute_gae", record_gae)
    monkeypatch.setattr(agent, "ppo_loss", record_loss)
    drive(agent, env, rollouts * updates)
    assert len(records) == updates and all(len(r["losses"]) == epochs * mini_batches for r in records)
    return group, records


def per_agent(x: torch.Tensor) -> torch.Tensor:
    """``(T, G, N, 1)`` -> ``(G, T * N, 1)``, the update's layout."""
    return x.transpose(0, 1).reshape(x.shape[1], -1, 1)


@pytest.mark.parametrize("shared", [True, False], ids=["shared-critic", "per-agent-critics"])
def test_gae_gets_denormalised_values_and_the_loss_normalised_targets_as_the_reference(monkeypatch, shared):
    group, records = drive_and_record(monkeypatch, shared=shared, mini_batches=1)
    G = group.size
    refs = [ReferenceValueNorm(1)] if shared else [ReferenceValueNorm(1) for _ in range(G)]

    def reference(fn, x):  # x (..., G, N, 1): each agent's slice through its reference (one for a shared critic)
        return fn(refs[0], x) if shared else torch.stack([fn(r, x[:, i]) for i, r in enumerate(refs)], dim=1)

    def denormalize(x):
        return reference(lambda r, v: r.denormalize(v.reshape(-1, 1)).view(v.shape), x)

    for record in records:
        stored, kwargs = record["stored"], record["gae"]
        mask = stored["agent_mask"]
        # GAE's inputs: the critic's stored outputs denormalised with the statistics of the rollout's collection
        close(kwargs["values"], denormalize(stored["values"]))
        truncated = stored["truncated"][:-1]
        expected_next = torch.where(
            truncated, denormalize(stored["final_values"][:-1]), denormalize(stored["values"][1:])
        )
        close(kwargs["next_values"][:-1], expected_next)
        assert stored["truncated"].any(), "the rollout should hold time-limit truncations"
        if stored["last"] is not None:  # the bootstrap: the critic's value of the observations after the rollout
            last = torch.where(stored["truncated"][-1:], stored["final_values"][-1:], stored["last"])
            close(kwargs["next_values"][-1:], denormalize(last))
        # the targets: the reference updated once with the rollout's unmasked returns, then normalising them
        returns = record["returns"]
        if shared:
            refs[0].update(returns[mask].unsqueeze(-1))
        else:
            for i, r in enumerate(refs):
                r.update(returns[:, i][mask[:, i]].unsqueeze(-1))
        targets = reference(lambda r, v: r.normalize(v.reshape(-1, 1)).view(v.shape), returns)
        for call in record["losses"]:  # one mini-batch: every sample in order, each epoch the same targets
            close(call["returns"], per_agent(targets))
            close(call["old_values"], per_agent(stored["values"]))  # clip anchor: the raw (normalised) output


def per_mini_batch_targets(records, mini_batches: int, epochs: int = 2) -> list[list[torch.Tensor]]:
    """The paper's ``cal_value_loss`` on our recorded rollouts: one shared-critic normaliser updated with every
    mini-batch's returns (the unmasked ones), then normalising them; per update, each loss call's targets and mask."""
    ref, out = ReferenceValueNorm(1), []
    for record in records:
        returns, mask = per_agent(record["returns"]), per_agent(record["stored"]["agent_mask"])
        calls = []
        for _ in range(epochs):
            for indexes in torch.tensor_split(torch.arange(returns.shape[1]), mini_batches):
                r, m = returns[:, indexes], mask[:, indexes]
                ref.update(r[m].unsqueeze(-1))
                calls.append((ref.normalize(r), m))
        out.append(calls)
    return out


@pytest.mark.parametrize("mini_batches", [1, 3])
def test_updating_once_per_rollout_against_the_papers_update_per_mini_batch(monkeypatch, mini_batches):
    """By design ours folds the rollout's returns in once, before the epochs; the paper's code folds each mini-batch's
    returns in inside the loss. On the first rollout with one mini-batch that is the same (re-folding the same batch
    leaves the debiased moments as they are); with several mini-batches, or from the second rollout on (where the
    paper's code has given each earlier rollout ``epochs * mini_batches`` folds), the targets differ."""
    group, records = drive_and_record(monkeypatch, shared=True, mini_batches=mini_batches)
    theirs = per_mini_batch_targets(records, mini_batches)
    differences = []
    for record, calls in zip(records, theirs, strict=True):
        pairs = zip(record["losses"], calls, strict=True)
        differences.append(max(float((loss["returns"] - t)[m].abs().max()) for loss, (t, m) in pairs))
    print(f"mini_batches={mini_batches}: max |our target - paper's target| per update {differences}")
    if mini_batches == 1:
        assert differences[0] < 1e-4
    else:
        assert differences[0] > 1e-3
    assert differences[1] > 1e-3


# ---------------------------------------------------------------- the value loss


def reference_huber_loss(e, d):
    """``huber_loss`` of ``onpolicy/utils/util.py`` (the one ``r_mappo.py`` imports)."""
    a = (abs(e) <= d).float()
    b = (abs(e) > d).float()
    return a * e**2 / 2 + b * d * (abs(e) - d / 2)


def reference_mse_loss(e):
    """``mse_loss`` of ``onpolicy/utils/util.py``."""
    return e**2 / 2


@pytest.mark.parametrize("huber_delta", [0.0, 10.0, 0.5])
def test_our_value_loss_is_twice_the_papers_cal_value_loss(huber_delta):
    """``cal_value_loss`` (``onpolicy/algorithms/r_mappo/r_mappo.py``) element-wise, with clipping, before its mean:
    ours is the same max of clipped and unclipped errors with the same anchor, scaled by 2 (our squared error is
    ``e ** 2`` and our Huber ``e ** 2`` inside ``delta``), i.e. the paper's ``value_loss_coef`` is our
    ``value_loss_scale / 2``."""
    generator = torch.Generator().manual_seed(4)
    values, anchor, targets = (torch.randn(256, 1, generator=generator) * 2.0 for _ in range(3))
    clip = 0.2
    clipped = anchor + (values - anchor).clamp(-clip, clip)
    loss = (lambda e: reference_huber_loss(e, huber_delta)) if huber_delta > 0 else reference_mse_loss
    theirs = torch.max(loss(targets - values), loss(targets - clipped))
    ours = value_loss(
        predicted_values=values, old_values=anchor, returns=targets, value_clip=clip, huber_delta=huber_delta
    )
    close(ours, 2.0 * theirs)
