"""ValueNorm (the MAPPO paper's value normaliser) and masked preprocessor statistics, against plain references."""

import pytest
import torch
from skrl.resources.preprocessors.torch import RunningStandardScaler

from skrl_marl_ext import ValueNorm, preprocessors
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


def _plain_moments(x, mask, agents):
    """Plain float64 reference of each agent's moments: ``x`` ``(T, 1 or G, N, S)``, ``mask`` ``(T, 1 or G, N, 1)``."""
    means, m2s, counts = [], [], []
    for g in range(agents):
        rows = x[:, g % x.shape[1]].reshape(-1, x.shape[-1]).double()
        keep = torch.ones(rows.shape[0], dtype=torch.bool) if mask is None else mask[:, g % mask.shape[1]].reshape(-1)
        rows = rows[keep]
        mean = rows.sum(0) / max(len(rows), 1)
        means.append(mean)
        m2s.append(((rows - mean) ** 2).sum(0))
        counts.append(float(len(rows)))
    return torch.stack(means), torch.stack(m2s), torch.tensor(counts, dtype=torch.float64)


@pytest.mark.parametrize("chunk", [64, 1 << 22], ids=["many-chunks", "one-chunk"])
@pytest.mark.parametrize(
    "x_rows, mask_rows", [(1, 4), (4, 1), (4, 4), (1, None), (4, None), (1, 1)], ids=lambda r: f"rows{r}"
)
@pytest.mark.parametrize("offset", [0.0, 1e4], ids=["centred", "large-mean"])
def test_per_agent_moments_match_a_float64_reference(chunk, x_rows, mask_rows, offset):
    """Float32 chunks (corrected two-pass) merged in float64 (Chan et al.) against plain float64 on the same data:
    means within 1e-6 of the data's scale, sums of squared deviations within 1e-5 relative, counts exact; a shared
    input (1 row for 4 agents) with each agent's own mask included, NaN in masked-out rows never reached, and data with
    a mean 1e4 times its spread, where float32 sums of squares lose every digit."""
    G, T, N, S = 4, 6, 40, 3
    generator = torch.Generator().manual_seed(0)
    x = offset + torch.randn(T, x_rows, N, S, generator=generator) * torch.tensor([1.0, 0.01, 100.0])
    mask = None if mask_rows is None else torch.rand(T, mask_rows, N, 1, generator=generator) > 0.3
    if mask is not None and x_rows == mask_rows:
        x[~mask.expand_as(x)] = float("nan")  # masked-out rows never reach the moments
    mean, m2, count = preprocessors.per_agent_moments(x, mask, agents=G, agent_dim=1, chunk_elements=chunk)
    ref_mean, ref_m2, ref_count = _plain_moments(x, mask, G)
    assert mean.dtype == m2.dtype == count.dtype == torch.float64
    assert mean.shape == m2.shape == (G, S) and count.shape == (G,)
    torch.testing.assert_close(count, ref_count, rtol=0, atol=0)
    scale = ref_mean.abs() + (ref_m2 / ref_count.unsqueeze(-1)).sqrt()
    assert ((mean - ref_mean).abs() <= 1e-6 * scale).all()
    torch.testing.assert_close(m2, ref_m2, rtol=1e-5, atol=0)


def test_float32_sums_of_squares_fail_where_the_moments_hold():
    """Why the moments are centred per chunk: ``sum(x^2) - n mean^2`` in float32 on data whose mean is 1e4 times its
    spread has no correct digit left; :func:`per_agent_moments` on the same float32 data is within 1e-5."""
    x = 1e4 + torch.randn(1, 4096, 1, generator=torch.Generator().manual_seed(1))
    naive = (x * x).sum() - x.sum() ** 2 / x.numel()
    _, reference, _ = _plain_moments(x.view(1, 1, -1, 1), None, 1)
    _, m2, _ = preprocessors.per_agent_moments(x, None, agents=1, agent_dim=0)
    assert abs(naive.item() - reference.item()) > 0.5 * reference.item()
    torch.testing.assert_close(m2, reference, rtol=1e-5, atol=0)


def test_statistics_of_an_input_all_agents_share_are_each_agents_own():
    """A stacked group's update with one shared input and each agent's own mask equals each agent's own scaler fed
    its unmasked rows (``update_statistics`` one by one), within float rounding."""
    from skrl_marl_ext.groups.preprocessors import StackedPreprocessor

    G, T, N, S = 3, 5, 16, 4
    x = torch.randn(T, 1, N, S) * 3 + 1
    mask = torch.rand(T, G, N, 1) > 0.4
    stacked = StackedPreprocessor([RunningStandardScaler(size=S) for _ in range(G)])
    stacked.update(x, mask, agent_dim=1)
    for g in range(G):
        alone = RunningStandardScaler(size=S)
        update_statistics(alone, x[:, 0], mask[:, g])
        torch.testing.assert_close(stacked.modules[g].running_mean, alone.running_mean, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(stacked.modules[g].running_variance, alone.running_variance, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(stacked.modules[g].current_count, alone.current_count)
    assert not stacked.same_for_all()
    stacked.update(x, None, agent_dim=1)
    assert not stacked.same_for_all()
    same = StackedPreprocessor([RunningStandardScaler(size=S) for _ in range(G)])
    same.update(x, None, agent_dim=1)
    assert same.same_for_all()


def _moments_on_rank(rank: int, port: int, out: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        x, mask = _rank_data()
        half = slice(0, 3) if rank == 0 else slice(3, 6)
        shift = torch.full((4, 3), 1e4)  # what every rank holds, e.g. the running means
        moments = preprocessors.per_agent_moments(x[half], mask[half], agents=4, agent_dim=1, shift=shift)
        torch.save(moments, f"{out}/rank{rank}.pt")
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _rank_data():
    generator = torch.Generator().manual_seed(3)
    x = 1e4 + torch.randn(6, 1, 40, 3, generator=generator) * torch.tensor([1.0, 0.01, 100.0])
    return x, torch.rand(6, 4, 40, 1, generator=generator) > 0.3


@pytest.mark.slow  # two processes
def test_moments_over_ranks_are_the_moments_of_all_their_rows(tmp_path):
    """Two gloo ranks with half the steps each end with the moments of every row (one collective about a shift all
    ranks hold), within float64 rounding, bitwise the same on both ranks."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_moments_on_rank, args=(port, str(tmp_path)), nprocs=2, join=True)
    first, second = (torch.load(tmp_path / f"rank{r}.pt") for r in range(2))
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)
    x, mask = _rank_data()
    for got, expected in zip(first, _plain_moments(x, mask, 4), strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-9)
