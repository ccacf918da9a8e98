"""The math of the on-policy agents against plain references and hand-computed values."""

import itertools
import math

import pytest
import torch

from skrl_marl_ext.functional import (
    approx_kl,
    clip_fraction,
    clipped_surrogate_loss,
    compute_gae,
    explained_variance,
    masked_mean,
    normalize_advantages,
    squared_or_huber_error,
    value_loss,
)
from skrl_marl_ext.functional.gae import compute_gae_reference

DONE_PATTERNS = ["none", "terminated", "truncated", "both", "dense"]


def _dones(pattern, shape, generator):
    T = shape[0]
    term = torch.zeros(shape, dtype=torch.bool)
    trunc = torch.zeros(shape, dtype=torch.bool)
    if pattern in ("terminated", "both"):
        term[T // 2] = True
    if pattern in ("truncated", "both"):
        trunc[T // 3] = True
        trunc[-1] = True
    if pattern == "dense":
        term = torch.rand(shape, generator=generator) < 0.2
        trunc = torch.rand(shape, generator=generator) < 0.2
    return term, trunc


@pytest.mark.parametrize(
    ("gamma", "lam", "length", "pattern", "bootstrap"),
    list(itertools.product([0.0, 0.9, 0.99, 1.0], [0.0, 0.5, 0.95, 1.0], [1, 7], DONE_PATTERNS, [False, True])),
)
def test_gae_matches_reference(gamma, lam, length, pattern, bootstrap):
    g = torch.Generator().manual_seed(length * 7 + len(pattern))
    shape = (length, 2, 5, 1)  # (T, agents, envs, 1)
    rewards, values, next_values = (torch.randn(shape, generator=g, dtype=torch.float64) for _ in range(3))
    term, trunc = _dones(pattern, shape, g)
    kwargs = dict(
        rewards=rewards,
        values=values,
        next_values=next_values,
        terminated=term,
        truncated=trunc,
        discount_factor=gamma,
        lambda_coefficient=lam,
        time_limit_bootstrap=bootstrap,
    )
    adv, ret = compute_gae(**kwargs)
    ref_adv, ref_ret = compute_gae_reference(**kwargs)
    torch.testing.assert_close(adv, ref_adv, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(ret, ref_ret, rtol=1e-10, atol=1e-10)


def test_gae_hand_values_and_no_leak_across_episodes():
    # one env, 4 steps: episode A = steps 0-1 (truncated at 1), episode B = steps 2-3 (terminated at 3)
    r = torch.tensor([1.0, 2.0, 3.0, 4.0]).view(4, 1)
    v = torch.tensor([0.5, 0.5, 0.5, 0.5]).view(4, 1)
    nv = torch.tensor([0.5, 10.0, 0.5, 100.0]).view(4, 1)  # V of the obs after each step
    term = torch.tensor([False, False, False, True]).view(4, 1)
    trunc = torch.tensor([False, True, False, False]).view(4, 1)
    gamma, lam = 0.9, 0.8
    adv, _ = compute_gae(
        rewards=r,
        values=v,
        next_values=nv,
        terminated=term,
        truncated=trunc,
        discount_factor=gamma,
        lambda_coefficient=lam,
        time_limit_bootstrap=True,
    )
    d3 = 4.0 - 0.5  # terminated: no bootstrap
    d2 = 3.0 + gamma * 0.5 - 0.5
    d1 = 2.0 + gamma * 10.0 - 0.5  # truncated + time_limit_bootstrap: bootstrap kept
    d0 = 1.0 + gamma * 0.5 - 0.5
    expected = [d0 + gamma * lam * d1, d1, d2 + gamma * lam * d3, d3]  # recursion cut at step 1
    torch.testing.assert_close(adv.view(-1), torch.tensor(expected))
    # episode A's advantages do not depend on episode B's rewards
    r2 = r.clone()
    r2[2:] += 1000.0
    adv2, _ = compute_gae(
        rewards=r2,
        values=v,
        next_values=nv,
        terminated=term,
        truncated=trunc,
        discount_factor=gamma,
        lambda_coefficient=lam,
        time_limit_bootstrap=True,
    )
    torch.testing.assert_close(adv2[:2], adv[:2])


def test_gae_without_time_limit_bootstrap_runs_on_as_skrls():
    """Off, a truncation is not an episode end (skrl 2.1.1): the bootstrap reads the next step's value and the
    recursion runs on into the next episode; equal to skrl's own GAE on the same data."""
    from skrl.multi_agents.torch.mappo.mappo import compute_gae as skrl_gae

    generator = torch.Generator().manual_seed(0)
    T, N = 12, 5
    r, v = torch.randn(T, N, 1, generator=generator), torch.randn(T, N, 1, generator=generator)
    last = torch.randn(1, N, 1, generator=generator)
    term = torch.rand(T, N, 1, generator=generator) < 0.15
    trunc = (torch.rand(T, N, 1, generator=generator) < 0.2) & ~term
    gamma, lam = 0.9, 0.8
    adv, ret = compute_gae(
        rewards=r,
        values=v,
        next_values=torch.cat([v[1:], last]),
        terminated=term,
        truncated=trunc,
        discount_factor=gamma,
        lambda_coefficient=lam,
        time_limit_bootstrap=False,
    )
    skrl_returns, _ = skrl_gae(
        rewards=r,
        terminated=term,
        truncated=trunc,
        values=v,
        last_values=last[0],
        discount_factor=gamma,
        lambda_coefficient=lam,
        time_limit_bootstrap=False,
    )
    torch.testing.assert_close(ret, skrl_returns)
    # one hand value: step 1 of the first example's layout, truncated, bootstraps from step 2 and carries its advantage
    r1 = torch.tensor([1.0, 2.0, 3.0, 4.0]).view(4, 1)
    v1 = torch.full((4, 1), 0.5)
    nv1 = torch.tensor([0.5, 0.5, 0.5, 100.0]).view(4, 1)
    t1 = torch.tensor([False, False, False, True]).view(4, 1)
    c1 = torch.tensor([False, True, False, False]).view(4, 1)
    adv1, _ = compute_gae(
        rewards=r1,
        values=v1,
        next_values=nv1,
        terminated=t1,
        truncated=c1,
        discount_factor=gamma,
        lambda_coefficient=lam,
        time_limit_bootstrap=False,
    )
    d3, d2 = 4.0 - 0.5, 3.0 + gamma * 0.5 - 0.5
    assert adv1[1].item() == pytest.approx(2.0 + gamma * 0.5 - 0.5 + gamma * lam * (d2 + gamma * lam * d3))


def test_clipped_surrogate_hand_values():
    adv = torch.tensor([[1.0], [1.0], [-1.0], [-1.0]])
    ratio = torch.tensor([[1.5], [0.5], [1.5], [0.5]])
    old = torch.zeros(4, 1)
    loss = clipped_surrogate_loss(log_prob=ratio.log(), old_log_prob=old, advantages=adv, ratio_clip=0.2)
    # -min(r A, clip(r) A): A>0 -> min(1.5, 1.2)=1.2, min(0.5, 0.8)=0.5; A<0 -> min(-1.5,-1.2)=-1.5, min(-.5,-.8)=-.8
    torch.testing.assert_close(loss.view(-1), torch.tensor([-1.2, -0.5, 1.5, 0.8]))
    frac = clip_fraction(log_prob=ratio.log(), old_log_prob=old, ratio_clip=0.2)
    torch.testing.assert_close(frac.view(-1), torch.ones(4))


def test_value_loss_paper_clipping_and_huber():
    returns = torch.tensor([[1.0], [1.0], [0.0]])
    old = torch.tensor([[0.0], [0.0], [0.0]])
    pred = torch.tensor([[0.5], [2.0], [-0.1]])
    loss = value_loss(predicted_values=pred, old_values=old, returns=returns, value_clip=0.2)
    # clipped preds: 0.2, 0.2, -0.1 -> max((1-.5)^2, (1-.2)^2)=.64 ; max((1-2)^2, .64)=1 ; max(.01, .01)
    torch.testing.assert_close(loss.view(-1), torch.tensor([0.64, 1.0, 0.01]))
    unclipped = value_loss(predicted_values=pred, old_values=old, returns=returns, value_clip=0.0)
    torch.testing.assert_close(unclipped.view(-1), torch.tensor([0.25, 1.0, 0.01]))
    err = torch.tensor([0.5, -0.5, 3.0, -3.0])
    huber = squared_or_huber_error(err, huber_delta=1.0)
    # equals e^2 inside delta, 2*delta*(|e| - delta/2) outside
    torch.testing.assert_close(huber, torch.tensor([0.25, 0.25, 5.0, 5.0]))
    torch.testing.assert_close(squared_or_huber_error(err), err * err)


def test_masked_statistics_and_kl():
    x = torch.tensor([[1.0], [3.0], [100.0]])
    mask = torch.tensor([[True], [True], [False]])
    assert masked_mean(x, mask).item() == pytest.approx(2.0)
    assert masked_mean(x, torch.zeros_like(mask)).item() == 0.0
    norm = normalize_advantages(x, mask)
    torch.testing.assert_close(norm[:2].view(-1), torch.tensor([-1.0, 1.0]), atol=1e-6, rtol=0)
    log_ratio = torch.tensor([[math.log(2.0)]])
    kl = approx_kl(log_prob=log_ratio, old_log_prob=torch.zeros(1, 1))
    assert kl.item() == pytest.approx(1.0 - math.log(2.0))
    ev = explained_variance(values=x * 0 + 1, returns=x, mask=mask)
    assert ev.item() == pytest.approx(0.0, abs=1e-6)
    ev_perfect = explained_variance(values=x, returns=x)
    assert ev_perfect.item() == pytest.approx(1.0)
