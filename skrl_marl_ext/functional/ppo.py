"""PPO loss terms, written one term at a time (Schulman et al. 2017, https://arxiv.org/abs/1707.06347),
with the value-learning options of the MAPPO paper (Yu et al. 2022, https://arxiv.org/abs/2103.01955).

Every function returns the *element-wise* term (no reduction) so that the caller decides how to average:
over the samples of one agent, of a group, with or without agent masks (:func:`masked_mean`).
"""

from __future__ import annotations

import torch


def masked_mean(x: torch.Tensor, mask: torch.Tensor | None = None, *, dim=None, keepdim: bool = False) -> torch.Tensor:
    """Mean of ``x`` over the entries where ``mask`` is true (all entries when ``mask`` is None).

    :param x: Values, any shape.
    :param mask: Boolean or 0/1 mask broadcastable to ``x``, or None.
    :param dim: Dimension(s) to reduce; None reduces all.
    :param keepdim: Keep the reduced dimensions (with size 1); only with ``dim``.

    :return: The masked mean. Where a slice has no unmasked entry the result is 0 (not NaN).
    """
    if mask is None:
        return x.mean() if dim is None else x.mean(dim=dim, keepdim=keepdim)
    mask = mask.to(x.dtype).expand_as(x)
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1.0)
    return (x * mask).sum(dim=dim, keepdim=keepdim) / mask.sum(dim=dim, keepdim=keepdim).clamp(min=1.0)


def masked_mean_var(
    x: torch.Tensor, mask: torch.Tensor | None = None, *, dim=None, keepdim: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and (biased) variance of ``x`` over the unmasked entries.

    :param x: Values, any shape.
    :param mask: Boolean or 0/1 mask broadcastable to ``x``, or None.
    :param dim: Dimension(s) to reduce; None reduces all.
    :param keepdim: Keep the reduced dimensions (with size 1); only with ``dim``.

    :return: ``(mean, var)`` with the reduced shape.
    """
    mean = masked_mean(x, mask, dim=dim, keepdim=dim is not None)
    centred = x - mean
    var = masked_mean(centred * centred, mask, dim=dim, keepdim=keepdim)
    return (mean if keepdim or dim is None else mean.reshape(var.shape)), var


def check_shape(owner: str, name: str, x: torch.Tensor, shape: tuple) -> None:
    """:raises ValueError: naming ``owner`` and ``name`` when ``x`` is not of ``shape``."""
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{owner}: {name} has shape {tuple(x.shape)}, expected {tuple(shape)}")


def check_group_terms(owner: str, **terms: torch.Tensor | None) -> None:
    """Every given term is ``(G, B, 1)`` and of one shape (a ``(B, 1)`` or ``(G, B)`` one would broadcast)."""
    given = {name: x for name, x in terms.items() if x is not None}
    shape = next(iter(given.values())).shape
    if len(shape) != 3 or shape[-1] != 1:
        raise ValueError(f"{owner}: {next(iter(given))} has shape {tuple(shape)}, expected (G, B, 1)")
    for name, x in given.items():
        if x.shape != shape:
            raise ValueError(f"{owner}: {name} has shape {tuple(x.shape)}, expected {tuple(shape)}")


def group_mean(x: torch.Tensor, mask: torch.Tensor | None, *, per_agent: bool = False) -> torch.Tensor:
    """A group's mean of ``(G, B, 1)`` terms over the rows where ``mask`` is true.

    :param x: Terms, shape ``(G, B, 1)``.
    :param mask: Boolean rows to keep, shape ``(G, B, 1)``, or None for all.
    :param per_agent: Sum of each agent's own masked mean instead of the masked mean over all rows.
    :return: A scalar (the shapes are the caller's to check: :func:`check_group_terms`).
    """
    return masked_mean(x, mask, dim=(1, 2)).sum() if per_agent else masked_mean(x, mask)


def normalize_advantages(
    advantages: torch.Tensor, mask: torch.Tensor | None = None, *, dim=None, epsilon: float = 1e-8
) -> torch.Tensor:
    """Standardise advantages to zero mean and unit variance over the unmasked entries.

    :param advantages: Advantages, any shape.
    :param mask: Boolean or 0/1 mask broadcastable to ``advantages``, or None.
    :param dim: Dimension(s) the statistics are taken over; None takes them over all entries.
    :param epsilon: Added to the standard deviation.

    :return: Standardised advantages, same shape (masked entries are standardised too; they are never used).
    """
    mean, var = masked_mean_var(advantages, mask, dim=dim, keepdim=True)
    return (advantages - mean) / (var.sqrt() + epsilon)


def clipped_surrogate_loss(
    *, log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantages: torch.Tensor, ratio_clip: float
) -> torch.Tensor:
    """Negative clipped surrogate objective of PPO, element-wise.

    ``-min(r * A, clip(r, 1 - eps, 1 + eps) * A)`` with ``r = exp(log_prob - old_log_prob)``.

    :param log_prob: Log-probability of the taken actions under the current policy, shape ``(..., 1)``.
    :param old_log_prob: Log-probability when the actions were taken, shape ``(..., 1)``.
    :param advantages: Advantages, shape ``(..., 1)``.
    :param ratio_clip: Clipping coefficient ``eps``.

    :return: The loss term, shape ``(..., 1)``.
    """
    ratio = torch.exp(log_prob - old_log_prob)
    surrogate = ratio * advantages
    surrogate_clipped = torch.clamp(ratio, 1.0 - ratio_clip, 1.0 + ratio_clip) * advantages
    return -torch.min(surrogate, surrogate_clipped)


def squared_or_huber_error(error: torch.Tensor, huber_delta: float = 0.0) -> torch.Tensor:
    """Element-wise ``error ** 2``, or a Huber loss when ``huber_delta > 0``.

    The Huber loss is scaled so that it *equals* the squared error inside ``[-delta, delta]``
    (``e ** 2`` there, ``2 * delta * (|e| - delta / 2)`` beyond), so turning it on changes only how
    large errors are weighted, not the meaning of ``value_loss_scale``.

    :param error: Errors, any shape.
    :param huber_delta: Huber threshold; ``<= 0`` gives the squared error.

    :return: The loss term, same shape.
    """
    if huber_delta > 0:
        # torch's Huber loss is 0.5 e^2 inside: twice it is the squared error there
        return 2.0 * torch.nn.functional.huber_loss(error, torch.zeros_like(error), reduction="none", delta=huber_delta)
    return error * error


def value_loss(
    *,
    predicted_values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    value_clip: float = 0.0,
    huber_delta: float = 0.0,
) -> torch.Tensor:
    """Value loss, element-wise, with the MAPPO paper's clipping.

    Without clipping: ``l(returns - V)``. With ``value_clip > 0``:
    ``max(l(returns - V), l(returns - V_clipped))`` where
    ``V_clipped = V_old + clip(V - V_old, -value_clip, value_clip)`` (the paper's form, which never lets clipping
    *lower* the loss), ``l`` being the squared or Huber error of :func:`squared_or_huber_error`.

    :param predicted_values: Values predicted by the current critic, shape ``(..., 1)``.
    :param old_values: Values predicted when the rollout was collected, shape ``(..., 1)``.
    :param returns: Value targets, shape ``(..., 1)``.
    :param value_clip: Clipping range; ``<= 0`` disables clipping.
    :param huber_delta: Huber threshold; ``<= 0`` gives the squared error.

    :return: The loss term, shape ``(..., 1)``.
    """
    loss = squared_or_huber_error(returns - predicted_values, huber_delta)
    if value_clip > 0:
        clipped = old_values + torch.clamp(predicted_values - old_values, -value_clip, value_clip)
        loss = torch.max(loss, squared_or_huber_error(returns - clipped, huber_delta))
    return loss


def approx_kl(*, log_prob: torch.Tensor, old_log_prob: torch.Tensor) -> torch.Tensor:
    """Element-wise estimator of ``KL(old || new)``: ``(r - 1) - log r`` (non-negative, low variance).

    See http://joschu.net/blog/kl-approx.html.

    :param log_prob: Log-probability under the current policy, shape ``(..., 1)``.
    :param old_log_prob: Log-probability under the policy that collected the data, shape ``(..., 1)``.

    :return: The estimator, shape ``(..., 1)``.
    """
    log_ratio = log_prob - old_log_prob
    return torch.expm1(log_ratio) - log_ratio


def clip_fraction(*, log_prob: torch.Tensor, old_log_prob: torch.Tensor, ratio_clip: float) -> torch.Tensor:
    """Element-wise indicator (as float) of samples whose probability ratio left ``[1 - eps, 1 + eps]``.

    :return: 0/1 floats, shape ``(..., 1)``.
    """
    return ((torch.exp(log_prob - old_log_prob) - 1.0).abs() > ratio_clip).to(log_prob.dtype)


def explained_variance(
    *, values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor | None = None, dim=None
) -> torch.Tensor:
    """Fraction of the variance of the returns that the values explain: ``1 - Var[R - V] / Var[R]``.

    1 is perfect, 0 is no better than a constant, negative is worse. Where ``Var[R]`` is 0 the result is 0.

    :param values: Predicted values, any shape.
    :param returns: Value targets, same shape.
    :param mask: Boolean or 0/1 mask broadcastable to ``values``, or None.
    :param dim: Dimension(s) to reduce; None reduces all.
    """
    _, var_returns = masked_mean_var(returns, mask, dim=dim)
    _, var_residual = masked_mean_var(returns - values, mask, dim=dim)
    ratio = var_residual / var_returns.clamp(min=1e-12)
    return torch.where(var_returns > 1e-12, 1.0 - ratio, torch.zeros_like(ratio))


def ppo_loss(
    *,
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    values: torch.Tensor | None,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    entropy: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    per_agent: bool = False,
    ratio_clip: float,
    value_clip: float = 0.0,
    huber_delta: float = 0.0,
    value_loss_scale: float = 1.0,
    entropy_loss_scale: float = 0.0,
) -> dict[str, torch.Tensor]:
    """The clipped PPO loss as a dict of its terms (the shape of TorchRL's ``ClipPPOLoss``), over a group's batch.

    Every tensor is ``(G, B, 1)``: ``G`` agents, ``B`` samples each. ``values``/``returns`` are in the critic's
    (normalised) space; ``old_values`` is the critic's output at collection, the value-clip anchor; ``values`` is None
    when the value model is trained elsewhere (a team critic: ``loss_critic`` is then 0); ``entropy`` is None when its
    scale is 0; ``mask`` marks the samples that count (None: all).

    :param per_agent: Each ``loss_*`` is the sum of each agent's own mean (agents with models of their own: each
        model's gradient is that of its agent's loss alone) instead of the mean over all ``G * B`` samples.
    :param ratio_clip: PPO's ``eps``; ``value_clip``: the MAPPO paper's max form (``<= 0``: off); ``huber_delta``:
        Huber threshold of the value loss (``<= 0``: squared error); the two scales weight value and entropy terms.
    :return: ``loss_objective``, ``loss_critic`` (scaled), ``loss_entropy`` (scaled, 0 without ``entropy``) to sum,
        and detached per-agent ``(G,)`` ``objective``, ``critic``, ``entropy``, ``kl`` (the ``(r - 1) - log r``
        estimator) and ``clip_fraction``.
    """
    inputs = {"log_prob": log_prob, "old_log_prob": old_log_prob, "advantages": advantages, "values": values}
    check_group_terms("ppo_loss", **inputs, old_values=old_values, returns=returns, entropy=entropy, mask=mask)
    surrogate = clipped_surrogate_loss(
        log_prob=log_prob, old_log_prob=old_log_prob, advantages=advantages, ratio_clip=ratio_clip
    )
    critic = torch.zeros_like(surrogate)
    if values is not None:
        critic = value_loss(
            predicted_values=values,
            old_values=old_values,
            returns=returns,
            value_clip=value_clip,
            huber_delta=huber_delta,
        )
    terms = {
        "loss_objective": group_mean(surrogate, mask, per_agent=per_agent),
        "loss_critic": value_loss_scale * group_mean(critic, mask, per_agent=per_agent),
        "loss_entropy": -entropy_loss_scale * group_mean(entropy, mask, per_agent=per_agent)
        if entropy is not None
        else log_prob.new_zeros(()),
    }
    with torch.no_grad():
        G = log_prob.shape[0]
        terms["objective"] = masked_mean(surrogate, mask, dim=(1, 2))
        terms["critic"] = value_loss_scale * masked_mean(critic, mask, dim=(1, 2))
        terms["entropy"] = (
            -entropy_loss_scale * masked_mean(entropy, mask, dim=(1, 2))
            if entropy is not None
            else log_prob.new_zeros(G)
        )
        terms["kl"] = masked_mean(approx_kl(log_prob=log_prob, old_log_prob=old_log_prob), mask, dim=(1, 2))
        fraction = clip_fraction(log_prob=log_prob, old_log_prob=old_log_prob, ratio_clip=ratio_clip)
        terms["clip_fraction"] = masked_mean(fraction, mask, dim=(1, 2))
    return terms
