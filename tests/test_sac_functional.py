"""MASAC's and HASAC's math as pure functions: each against its plain reference over a grid, the squashed log-density
against torch's own transformed distribution, shape checks; the squashed Gaussian policy model."""

import itertools
import math

import gymnasium
import numpy as np
import pytest
import torch
from helpers import one_thread  # noqa: F401  (autouse)
from torch.distributions import Normal, TransformedDistribution
from torch.distributions.transforms import AffineTransform, TanhTransform

from skrl_marl_ext.functional.sac import (
    soft_actor_loss,
    soft_actor_loss_reference,
    soft_q_target,
    soft_q_target_reference,
    squashed_gaussian_log_prob,
    squashed_gaussian_log_prob_reference,
    temperature_loss,
    temperature_loss_reference,
)
from skrl_marl_ext.models import SquashedGaussianMLP

MASK_PATTERNS = ["all", "random", "none", "one-agent-dead"]


def _mask(pattern, G, B, generator):
    mask = torch.ones(G, B, 1, dtype=torch.bool)
    if pattern == "random":
        mask = torch.rand(G, B, 1, generator=generator) < 0.6
    elif pattern == "none":
        mask[:] = False
    elif pattern == "one-agent-dead":
        mask[-1] = False
    return mask


def _close(actual, expected, tolerance=1e-12):
    torch.testing.assert_close(actual.double(), expected.double(), rtol=tolerance, atol=tolerance)


def _temperature(kind, G, generator):
    return 0.3 if kind == "number" else torch.rand(G, 1, 1, generator=generator, dtype=torch.float64) + 0.05


# ---------------------------------------------------------------- against the references


@pytest.mark.parametrize(("A", "scale"), itertools.product([1, 3], [None, "skewed"]))
def test_squashed_log_prob_matches_reference_and_torchs_transformed_distribution(A, scale):
    g = torch.Generator().manual_seed(A)
    mean = torch.randn(32, A, generator=g, dtype=torch.float64)
    std = torch.rand(32, A, generator=g, dtype=torch.float64) + 0.1
    pre_tanh = mean + std * torch.randn(32, A, generator=g, dtype=torch.float64)
    log_prob = Normal(mean, std).log_prob(pre_tanh)
    scales = None if scale is None else torch.linspace(0.5, 2.0, A, dtype=torch.float64)
    ours = squashed_gaussian_log_prob(log_prob=log_prob, pre_tanh=pre_tanh, scale=scales)
    _close(ours, squashed_gaussian_log_prob_reference(log_prob=log_prob, pre_tanh=pre_tanh, scale=scales), 1e-9)
    transforms = [TanhTransform()] + ([] if scales is None else [AffineTransform(torch.zeros(A).double(), scales)])
    squashed = TransformedDistribution(Normal(mean, std), transforms)
    action = torch.tanh(pre_tanh) * (1.0 if scales is None else scales)
    expected = squashed.log_prob(action).sum(dim=-1, keepdim=True)
    _close(ours, expected, 1e-6)  # torch inverts the tanh (atanh), which loses digits near the bounds


def test_squashed_log_prob_is_finite_far_out_in_the_tails():
    pre_tanh = torch.tensor([[-40.0, 0.0, 40.0]])
    log_prob = Normal(torch.zeros(1, 3), torch.ones(1, 3)).log_prob(pre_tanh)
    out = squashed_gaussian_log_prob(log_prob=log_prob, pre_tanh=pre_tanh)
    assert torch.isfinite(out).all()
    # log(1 - tanh(u)^2) -> 2 log 2 - 2 |u| for large |u|
    expected = log_prob.sum() - 2 * (2 * math.log(2.0) - 2 * 40.0) - 0.0
    torch.testing.assert_close(out.sum(), expected, rtol=1e-6, atol=1e-4)


@pytest.mark.parametrize(
    ("G", "B", "twin", "gamma", "temperature"),
    itertools.product([1, 3], [1, 7], [False, True], [0.0, 0.9, 1.0], ["number", "per-agent"]),
)
def test_soft_q_target_matches_reference(G, B, twin, gamma, temperature):
    g = torch.Generator().manual_seed(G * 10 + B)
    kwargs = dict(
        rewards=torch.randn(G, B, 1, generator=g, dtype=torch.float64),
        next_q_values=[torch.randn(G, B, 1, generator=g, dtype=torch.float64) for _ in range(2 if twin else 1)],
        next_log_prob=torch.randn(G, B, 1, generator=g, dtype=torch.float64),
        temperature=_temperature(temperature, G, g),
        terminated=torch.rand(G, B, 1, generator=g) < 0.3,
        discount_factor=gamma,
    )
    _close(soft_q_target(**kwargs), soft_q_target_reference(**kwargs))


@pytest.mark.parametrize(
    ("G", "per_agent", "pattern", "temperature"),
    itertools.product([1, 3], [False, True], MASK_PATTERNS, ["number", "per-agent"]),
)
def test_soft_actor_loss_matches_reference(G, per_agent, pattern, temperature):
    g = torch.Generator().manual_seed(G + 5)
    kwargs = dict(
        q_values=torch.randn(G, 9, 1, generator=g, dtype=torch.float64),
        log_prob=torch.randn(G, 9, 1, generator=g, dtype=torch.float64),
        temperature=_temperature(temperature, G, g),
        mask=_mask(pattern, G, 9, g),
        per_agent=per_agent,
    )
    ours, reference = soft_actor_loss(**kwargs), soft_actor_loss_reference(**kwargs)
    for name in ("loss", "loss_q", "loss_entropy"):
        _close(ours[name], reference[name])


@pytest.mark.parametrize(("G", "per_agent", "pattern"), itertools.product([1, 3], [False, True], MASK_PATTERNS))
def test_temperature_loss_matches_reference(G, per_agent, pattern):
    g = torch.Generator().manual_seed(G + 11)
    kwargs = dict(
        log_temperature=torch.randn(G, 1, 1, generator=g, dtype=torch.float64),
        log_prob=torch.randn(G, 9, 1, generator=g, dtype=torch.float64),
        target_entropy=-2.0,
        mask=_mask(pattern, G, 9, g),
        per_agent=per_agent,
    )
    _close(temperature_loss(**kwargs), temperature_loss_reference(**kwargs))


# ---------------------------------------------------------------- behaviour


def test_temperature_rises_while_the_entropy_is_below_its_target_and_falls_above():
    log_temperature = torch.zeros(2, 1, 1, requires_grad=True)
    # agent 0: log pi = 3, entropy about -3 < target -1; agent 1: log pi = -3, entropy about 3 > target
    log_prob = torch.tensor([3.0, -3.0]).view(2, 1, 1).expand(2, 4, 1)
    mask = torch.ones(2, 4, 1, dtype=torch.bool)
    loss = temperature_loss(
        log_temperature=log_temperature, log_prob=log_prob, target_entropy=-1.0, mask=mask, per_agent=True
    )
    loss.backward()
    grad = log_temperature.grad.view(2)
    torch.testing.assert_close(grad, torch.tensor([-2.0, 4.0]))  # descent raises agent 0's alpha, lowers agent 1's


def test_soft_actor_loss_gives_no_gradient_to_the_temperature():
    temperature = torch.full((1, 1, 1), 0.5, requires_grad=True)
    log_prob = torch.randn(1, 4, 1, requires_grad=True)
    loss = soft_actor_loss(
        q_values=torch.randn(1, 4, 1), log_prob=log_prob, temperature=temperature, mask=torch.ones(1, 4, 1).bool()
    )
    loss["loss"].backward()
    assert temperature.grad is None and log_prob.grad is not None
    torch.testing.assert_close(log_prob.grad, torch.full((1, 4, 1), 0.5 / 4))


def test_shapes_are_checked():
    x = torch.zeros(2, 5, 1)
    with pytest.raises(ValueError, match=r"soft_q_target: next_log_prob has shape \(5, 1\)"):
        soft_q_target(
            rewards=x,
            next_q_values=[x, x],
            next_log_prob=torch.zeros(5, 1),
            temperature=1.0,
            terminated=x,
            discount_factor=0.9,
        )
    with pytest.raises(ValueError, match="expected one or two next_q_values"):
        soft_q_target(
            rewards=x, next_q_values=[x] * 3, next_log_prob=x, temperature=1.0, terminated=x, discount_factor=0.9
        )
    with pytest.raises(ValueError, match=r"soft_actor_loss: log_prob has shape \(2, 5\)"):
        soft_actor_loss(q_values=x, log_prob=torch.zeros(2, 5), temperature=1.0, mask=x.bool())
    with pytest.raises(ValueError, match=r"squashed_gaussian_log_prob: pre_tanh has shape \(4, 2\)"):
        squashed_gaussian_log_prob(log_prob=torch.zeros(4, 3), pre_tanh=torch.zeros(4, 2))


# ---------------------------------------------------------------- the squashed Gaussian policy


def test_squashed_gaussian_policy_acts_within_skewed_bounds_with_the_density_of_its_action():
    space = gymnasium.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([0.0, 5.0], np.float32))
    torch.manual_seed(0)
    policy = SquashedGaussianMLP(observation_space=gymnasium.spaces.Box(-1, 1, (4,)), action_space=space)
    obs = torch.randn(256, 4)
    actions, outputs = policy.act({"observations": obs}, role="policy")
    low, high = torch.tensor(space.low), torch.tensor(space.high)
    assert actions.shape == (256, 2) and outputs["log_prob"].shape == (256, 1)
    assert (actions >= low).all() and (actions <= high).all()
    mean, extra = policy.compute({"observations": obs})
    gaussian = Normal(mean, extra["log_std"].clamp(-20, 2).exp())
    squashed = TransformedDistribution(gaussian, [TanhTransform(), AffineTransform((high + low) / 2, (high - low) / 2)])
    inside = ((actions - low).abs() > 1e-3).all(-1) & ((actions - high).abs() > 1e-3).all(-1)
    expected = squashed.log_prob(actions).sum(-1, keepdim=True)
    torch.testing.assert_close(outputs["log_prob"][inside], expected[inside], rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(outputs["mean_actions"], (high + low) / 2 + (high - low) / 2 * torch.tanh(mean))


def test_squashed_gaussian_policy_refuses_an_unbounded_box():
    with pytest.raises(ValueError, match="needs a Box action space with finite bounds"):
        SquashedGaussianMLP(
            observation_space=gymnasium.spaces.Box(-1, 1, (4,)),
            action_space=gymnasium.spaces.Box(-np.inf, np.inf, (2,)),
        )
