"""ValueNorm (the MAPPO paper's value normaliser) and masked preprocessor statistics."""

import pytest
import torch
from skrl.resources.preprocessors.torch import RunningStandardScaler

from skrl_marl_ext import ValueNorm
from skrl_marl_ext.preprocessors import update_statistics


def test_value_norm_debiased_moments_match_hand_computation():
    norm = ValueNorm(1, beta=0.9)
    a, b = torch.tensor([[1.0], [3.0]]), torch.tensor([[10.0], [10.0]])
    norm.update(a)
    mean, var = norm.mean_var()
    # after one update the debiased moments are the batch's exactly
    assert mean.item() == pytest.approx(2.0)
    assert var.item() == pytest.approx(1.0)
    norm.update(b)
    # running_mean = 0.9*0.1*2 + 0.1*10, debias = 0.9*0.1 + 0.1
    expected_mean = (0.09 * 2.0 + 0.1 * 10.0) / 0.19
    expected_sq = (0.09 * 5.0 + 0.1 * 100.0) / 0.19
    mean, var = norm.mean_var()
    assert mean.item() == pytest.approx(expected_mean)
    assert var.item() == pytest.approx(expected_sq - expected_mean**2)


def test_value_norm_round_trip_and_min_variance():
    norm = ValueNorm(1)
    x = torch.randn(1000, 1) * 5 + 3
    norm(x, train=True)
    y = norm(x)
    assert y.mean().item() == pytest.approx(0.0, abs=1e-4)
    assert y.std().item() == pytest.approx(1.0, abs=1e-2)
    torch.testing.assert_close(norm(y, inverse=True), x, atol=1e-4, rtol=1e-5)
    const = ValueNorm(1)
    const.update(torch.full((10, 1), 7.0))
    assert const.mean_var()[1].item() == pytest.approx(1e-2)  # floored, not 0


def test_masked_update_ignores_masked_entries():
    x = torch.tensor([[1.0], [3.0], [1e6]])
    mask = torch.tensor([[True], [True], [False]])
    norm = ValueNorm(1)
    norm.update(x, mask)
    assert norm.mean_var()[0].item() == pytest.approx(2.0)
    # a skrl scaler fed only the unmasked rows is the reference for the mean and count (its count starts at 1, mean 0)
    scaler, reference = RunningStandardScaler(size=1), RunningStandardScaler(size=1)
    update_statistics(scaler, x, mask)
    reference(x[:2], train=True)
    torch.testing.assert_close(scaler.running_mean, reference.running_mean)
    torch.testing.assert_close(scaler.current_count, reference.current_count)
    # the variance is the exact population variance (skrl folds in the batch's unbiased variance times its count)
    torch.testing.assert_close(scaler.running_variance, _welford([1.0, 3.0]))


def _welford(values, mean=0.0, variance=1.0, count=1.0):
    """Plain reference: a scaler's population variance after ``values`` one at a time (prior: skrl's count 1, mean 0,
    variance 1)."""
    m2 = variance * count
    for value in values:
        count += 1.0
        delta = value - mean
        mean += delta / count
        m2 += delta * (value - mean)
    return torch.tensor([m2 / count], dtype=torch.float64)


@pytest.mark.parametrize("batches", [[[2.0]], [[1.0, -1.0, 4.0], [0.5], []], [[5.0, 5.0], [1.0, 2.0, 3.0, 4.0]]])
def test_scaler_update_matches_one_at_a_time_reference(batches):
    # batches of one sample (skrl's torch.var of it is NaN) and empty ones (no host read, no change) included
    scaler = RunningStandardScaler(size=1)
    for batch in batches:
        update_statistics(scaler, torch.tensor(batch, dtype=torch.float32).view(-1, 1))
    flat = [v for batch in batches for v in batch]
    torch.testing.assert_close(scaler.running_variance, _welford(flat))
    assert float(scaler.current_count) == 1 + len(flat)
    torch.testing.assert_close(scaler.running_mean, torch.tensor([sum(flat) / (1 + len(flat))], dtype=torch.float64))


def test_value_norm_state_dict_round_trip():
    norm = ValueNorm(1)
    norm.update(torch.randn(50, 1) * 3)
    other = ValueNorm(1)
    other.load_state_dict(norm.state_dict())
    x = torch.randn(4, 1)
    torch.testing.assert_close(other(x), norm(x))
