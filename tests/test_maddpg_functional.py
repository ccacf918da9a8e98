"""MADDPG's math as pure functions: each against its plain reference over a grid, hand values, shape checks; the
polyak update and the Gumbel-softmax actions it uses."""

import copy
import itertools

import pytest
import torch
from helpers import one_thread, params, spread  # noqa: F401  (one_thread: autouse)

from skrl_marl_ext.functional import (
    actor_loss,
    actor_loss_reference,
    critic_loss,
    critic_loss_reference,
    critic_target,
    critic_target_reference,
    group_mean,
    gumbel_softmax_st,
    joint_with_own_actions,
    joint_with_own_actions_reference,
    polyak_update_,
    polyak_update_reference_,
    smooth_target_actions,
    smooth_target_actions_reference,
)
from skrl_marl_ext.functional.gumbel import gumbel_max_actions, sample_gumbel
from skrl_marl_ext.models import DeterministicMLP, mask_logits

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


def _close(actual, expected):
    torch.testing.assert_close(actual.double(), expected.double(), rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- against the references


@pytest.mark.parametrize(("noise_clip", "bounds"), itertools.product([0.0, 0.2, 1.0], ["symmetric", "skewed"]))
def test_smooth_target_actions_match_reference(noise_clip, bounds):
    g = torch.Generator().manual_seed(1)
    actions = torch.randn(16, 3, generator=g, dtype=torch.float64)
    noise = 0.5 * torch.randn(16, 3, generator=g, dtype=torch.float64)
    if bounds == "symmetric":
        low, high = -torch.ones(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    else:
        low, high = torch.tensor([-0.5, 0.0, -2.0]).double(), torch.tensor([0.5, 1.0, 0.1]).double()
    ours = smooth_target_actions(actions=actions, noise=noise, noise_clip=noise_clip, low=low, high=high)
    _close(
        ours, smooth_target_actions_reference(actions=actions, noise=noise, noise_clip=noise_clip, low=low, high=high)
    )
    assert (ours >= low).all() and (ours <= high).all()


@pytest.mark.parametrize(("G", "B", "twin", "gamma"), itertools.product([1, 3], [1, 7], [False, True], [0.0, 0.9, 1.0]))
def test_critic_target_matches_reference(G, B, twin, gamma):
    g = torch.Generator().manual_seed(G * 10 + B)
    rewards = torch.randn(G, B, 1, generator=g, dtype=torch.float64)
    next_q = [torch.randn(G, B, 1, generator=g, dtype=torch.float64) for _ in range(2 if twin else 1)]
    terminated = torch.rand(G, B, 1, generator=g) < 0.3
    kwargs = dict(rewards=rewards, next_q_values=next_q, terminated=terminated, discount_factor=gamma)
    _close(critic_target(**kwargs), critic_target_reference(**kwargs))


@pytest.mark.parametrize(
    ("G", "twin", "per_agent", "pattern"), itertools.product([1, 3], [False, True], [False, True], MASK_PATTERNS)
)
def test_critic_loss_matches_reference(G, twin, per_agent, pattern):
    g = torch.Generator().manual_seed(G + 2 * twin + 4 * per_agent)
    B = 6
    q = [torch.randn(G, B, 1, generator=g, dtype=torch.float64) for _ in range(2 if twin else 1)]
    targets = torch.randn(G, B, 1, generator=g, dtype=torch.float64)
    kwargs = dict(q_values=q, targets=targets, mask=_mask(pattern, G, B, g), per_agent=per_agent)
    ours, reference = critic_loss(**kwargs), critic_loss_reference(**kwargs)
    assert set(ours) == set(reference) == {"loss", "squared_error"}
    for name in ours:
        _close(ours[name], reference[name])


@pytest.mark.parametrize(
    ("G", "regularization", "per_agent", "pattern"),
    itertools.product([1, 3], [0.0, 0.01], [False, True], MASK_PATTERNS),
)
def test_actor_loss_matches_reference(G, regularization, per_agent, pattern):
    g = torch.Generator().manual_seed(G + 5)
    B, A = 6, 2
    q = torch.randn(G, B, 1, generator=g, dtype=torch.float64)
    pre_tanh = 3 * torch.randn(G, B, A, generator=g, dtype=torch.float64)
    kwargs = dict(
        q_values=q,
        mask=_mask(pattern, G, B, g),
        pre_tanh=pre_tanh,
        regularization=regularization,
        per_agent=per_agent,
    )
    ours, reference = actor_loss(**kwargs), actor_loss_reference(**kwargs)
    assert set(ours) == set(reference) == {"loss", "loss_policy", "loss_regularization"}
    for name in ours:
        _close(ours[name], reference[name])


@pytest.mark.parametrize(("G", "discrete"), itertools.product([1, 3], [False, True]))
def test_joint_with_own_actions_matches_the_per_agent_concatenation(G, discrete):
    """The actor's joint actions, one scatter per group, equal agent-by-agent copies with the agent's columns
    replaced; agent ``i``'s slice depends on its own action only."""
    g = torch.Generator().manual_seed(G)
    B, A, agents = 5, 5 if discrete else 2, 4
    joint = torch.randn(B, agents * A, generator=g)
    own = torch.randn(G, B, A, generator=g, requires_grad=True)
    agents_of_group = torch.randperm(agents, generator=g)[:G]
    columns = torch.stack([i * A + torch.arange(A) for i in agents_of_group.tolist()])
    ours = joint_with_own_actions(joint_actions=joint, own_actions=own, columns=columns)
    assert torch.equal(ours, joint_with_own_actions_reference(joint_actions=joint, own_actions=own, columns=columns))
    for i in range(G):
        (grad,) = torch.autograd.grad(ours[i].sum(), own, retain_graph=True)
        assert grad[i].abs().sum() > 0 and all(grad[j].abs().sum() == 0 for j in range(G) if j != i)


# ---------------------------------------------------------------- hand values and shape checks


def test_hand_values():
    # clipped double Q: the smaller target value; terminated rows keep the reward only
    rewards = torch.tensor([1.0, 2.0]).view(1, 2, 1)
    y = critic_target(
        rewards=rewards,
        next_q_values=[torch.tensor([5.0, 3.0]).view(1, 2, 1), torch.tensor([4.0, 9.0]).view(1, 2, 1)],
        terminated=torch.tensor([False, True]).view(1, 2, 1),
        discount_factor=0.5,
    )
    torch.testing.assert_close(y.view(-1), torch.tensor([1.0 + 0.5 * 4.0, 2.0]))
    # a masked row does not count; twin losses add up
    mask = torch.tensor([True, False]).view(1, 2, 1)
    q = torch.tensor([2.0, 100.0]).view(1, 2, 1)
    loss = critic_loss(q_values=[q, q + 1], targets=torch.zeros(1, 2, 1), mask=mask)
    assert loss["loss"].item() == pytest.approx(4.0 + 9.0)
    # per agent: each agent's own mean, summed (a group of two agents with 1 and 3 live rows)
    x = torch.tensor([[1.0, 0.0, 0.0], [2.0, 4.0, 6.0]]).unsqueeze(-1)
    alive = torch.tensor([[True, False, False], [True, True, True]]).unsqueeze(-1)
    assert group_mean(x, alive).item() == pytest.approx(13.0 / 4)
    assert group_mean(x, alive, per_agent=True).item() == pytest.approx(1.0 + 4.0)
    # the actor's penalty: w times the mean over rows of the mean square over action dimensions
    terms = actor_loss(q_values=q, mask=mask, pre_tanh=torch.tensor([[[1.0, 3.0], [50.0, 50.0]]]), regularization=0.1)
    assert terms["loss_policy"].item() == pytest.approx(-2.0)
    assert terms["loss_regularization"].item() == pytest.approx(0.1 * 5.0)
    assert terms["loss"].item() == pytest.approx(-2.0 + 0.5)


def test_shapes_that_would_broadcast_are_refused():
    G, B = 2, 4
    good = torch.zeros(G, B, 1)
    with pytest.raises(ValueError, match=r"critic_target: terminated has shape \(2, 4\)"):
        critic_target(rewards=good, next_q_values=[good], terminated=torch.zeros(G, B), discount_factor=0.9)
    with pytest.raises(ValueError, match=r"critic_target: rewards has shape \(4, 1\), expected \(G, B, 1\)"):
        critic_target(rewards=torch.zeros(B, 1), next_q_values=[good], terminated=good, discount_factor=0.9)
    with pytest.raises(ValueError, match="one or two"):
        critic_target(rewards=good, next_q_values=[good] * 3, terminated=good, discount_factor=0.9)
    with pytest.raises(ValueError, match=r"critic_loss: mask has shape \(1, 4, 1\)"):
        critic_loss(q_values=[good], targets=good, mask=torch.ones(1, B, 1, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"actor_loss: pre_tanh has shape \(8, 3\)"):
        actor_loss(q_values=good, mask=good.bool(), pre_tanh=torch.zeros(G * B, 3), regularization=0.1)
    with pytest.raises(ValueError, match="regularization needs pre_tanh"):
        actor_loss(q_values=good, mask=good.bool(), regularization=0.1)
    with pytest.raises(ValueError, match=r"smooth_target_actions: noise has shape \(1, 2\)"):
        smooth_target_actions(
            actions=torch.zeros(4, 2), noise=torch.zeros(1, 2), noise_clip=0.5, low=-torch.ones(2), high=torch.ones(2)
        )
    with pytest.raises(ValueError, match=r"joint_with_own_actions: columns has shape \(2, 3\)"):
        joint_with_own_actions(
            joint_actions=torch.zeros(B, 8), own_actions=torch.zeros(G, B, 2), columns=torch.zeros(2, 3).long()
        )


# ---------------------------------------------------------------- polyak and Gumbel-softmax


@pytest.mark.parametrize("polyak", [0.0, 0.005, 0.3, 1.0])
def test_polyak_update_matches_reference_and_skrl_convention(polyak):
    online = torch.nn.Linear(5, 3)
    target = torch.nn.Linear(5, 3)
    before = [p.detach().clone() for p in target.parameters()]
    reference = copy.deepcopy(target)
    polyak_update_(target=target.parameters(), online=online.parameters(), polyak=polyak)
    polyak_update_reference_(target=reference.parameters(), online=online.parameters(), polyak=polyak)
    for t, r, o, b in zip(target.parameters(), reference.parameters(), online.parameters(), before, strict=True):
        torch.testing.assert_close(t, r)
        torch.testing.assert_close(t, polyak * o + (1 - polyak) * b)
    # skrl's Model.update_parameters states the same convention
    env = spread(num_envs=2, continuous=True)
    a = DeterministicMLP(observation_space=env.observation_space("agent_0"), action_space=env.action_space("agent_0"))
    b = DeterministicMLP(observation_space=env.observation_space("agent_0"), action_space=env.action_space("agent_0"))
    ours = copy.deepcopy(b)
    b.update_parameters(a, polyak=polyak)
    polyak_update_(target=ours.parameters(), online=a.parameters(), polyak=polyak)
    torch.testing.assert_close(params(ours), params(b))


def test_gumbel_softmax_st_is_torchs_hard_gumbel_softmax():
    logits = torch.randn(64, 5, requires_grad=True)
    torch.manual_seed(3)
    ours = gumbel_softmax_st(logits=logits, temperature=0.7)
    (ours * torch.arange(5.0)).sum().backward()
    grad_ours = logits.grad.clone()
    logits.grad = None
    torch.manual_seed(3)
    theirs = torch.nn.functional.gumbel_softmax(logits, tau=0.7, hard=True)
    (theirs * torch.arange(5.0)).sum().backward()
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(grad_ours, logits.grad)
    assert torch.all(ours.sum(-1) == 1) and torch.all((ours == 0) | (ours == 1))
    assert grad_ours.abs().sum() > 0
    with pytest.raises(ValueError, match="temperature"):
        gumbel_softmax_st(logits=logits, temperature=0.0)


def test_masked_gumbel_softmax_is_the_softmax_over_the_allowed_actions():
    torch.manual_seed(0)
    logits = torch.randn(64, 5, requires_grad=True)
    mask = torch.rand(64, 5) < 0.5
    mask[torch.arange(64), torch.randint(5, (64,))] = True
    weights = torch.randn(5)
    # the logits a MaskedCategoricalMixin gives (lowest finite value where masked): at temperature 0.25,
    # (min + noise) / 0.25 overflows to -inf, which the softmax weighs 0 with a zero gradient
    torch.manual_seed(1)
    ours = gumbel_softmax_st(logits=mask_logits(logits, mask), temperature=0.25, mask=mask)
    torch.manual_seed(1)
    noise = sample_gumbel(logits)  # the noise torch's gumbel_softmax drew
    (grad_ours,) = torch.autograd.grad((ours * weights).sum(), logits)
    # reference: the softmax over the allowed entries only (masked ones -inf), straight-through
    soft = torch.softmax(((logits + noise) / 0.25).masked_fill(~mask, -torch.inf), dim=-1)
    reference = torch.nn.functional.one_hot(soft.argmax(-1), 5).float() - soft.detach() + soft
    (grad_reference,) = torch.autograd.grad((reference * weights).sum(), logits)
    torch.testing.assert_close(ours, reference)
    torch.testing.assert_close(grad_ours, grad_reference)
    assert torch.all(ours[~mask] == 0) and torch.all(grad_ours[~mask] == 0) and torch.isfinite(grad_ours).all()
    assert grad_ours.abs().sum() > 0
    # no mask: unchanged (torch's hard Gumbel-softmax, tested above); a row allowing nothing stays finite
    torch.manual_seed(2)
    all_allowed = gumbel_softmax_st(logits=logits, mask=torch.ones(64, 5, dtype=torch.bool))
    torch.manual_seed(2)
    torch.testing.assert_close(all_allowed, gumbel_softmax_st(logits=logits))
    nothing = gumbel_softmax_st(logits=logits[:2], temperature=0.25, mask=torch.zeros(2, 5, dtype=torch.bool))
    assert torch.isfinite(nothing).all() and torch.all(nothing.sum(-1) == 1)


def test_gumbel_max_actions_draw_only_allowed_actions_uniformly():
    torch.manual_seed(0)
    mask = torch.tensor([[True, False, True, False, True], [False, False, False, True, False]]).repeat(2000, 1)
    actions = gumbel_max_actions(logits=torch.zeros(4000, 5), mask=mask)
    assert actions.shape == (4000, 1) and mask.gather(1, actions).all()
    counts = torch.bincount(actions[0::2].view(-1), minlength=5)
    assert counts[[1, 3]].sum() == 0 and counts[[0, 2, 4]].min() > 600  # about 2000 / 3 each
    noise = sample_gumbel(torch.zeros(8, 5))
    logits = torch.randn(8, 5)
    expected = (logits + noise).masked_fill(~mask[:8], -torch.inf).argmax(-1, keepdim=True)
    assert torch.equal(gumbel_max_actions(logits=logits, mask=mask[:8], gumbel_noise=noise), expected)
