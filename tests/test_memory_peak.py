"""The live-storage counter of ``benchmarks/memory_peak.py`` on known allocations, and a bound it shows: the statistics
of a state shared by the agents are taken without expanding it to them."""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

import pytest
import torch

from skrl_marl_ext import preprocessors

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
try:
    from memory_peak import LiveStorages, start_window
finally:
    sys.path.remove(str(REPO / "benchmarks"))

HERE = [os.path.dirname(os.path.abspath(__file__)) + os.sep]


def test_an_allocation_counts_its_bytes_and_freeing_it_lowers_the_count():
    with LiveStorages(locate=False) as counter:
        x = torch.empty(1000, 1000)
        assert counter.live == 4_000_000
        y = torch.ones(10, dtype=torch.float64)
        assert counter.live == 4_000_080
        del x
        assert counter.live == 80
        del y
    assert counter.live == 0
    assert counter.peak == 4_000_080


def test_views_and_in_place_ops_count_nothing_new():
    with LiveStorages(locate=False) as counter:
        x = torch.zeros(1000, 1000)
        views = [x[10:], x.view(-1), x.t(), x[:, :1].expand(1000, 5), x.unsqueeze(0), x.reshape(100, -1)]
        x.add_(1.0).mul_(2.0)
        torch.add(x, 1.0, out=x)
        assert counter.live == 4_000_000
        del x
        assert counter.live == 4_000_000  # the views keep the storage alive
        del views
    assert counter.live == 0
    assert counter.peak == 4_000_000


def test_a_storage_resized_in_place_is_recounted():
    with LiveStorages(locate=False) as counter:
        x = torch.empty(0)
        x.resize_(1000)
        assert counter.live == 4000
        x.resize_(2000)
        assert counter.live == 8000
        x.resize_(10)  # a storage never shrinks
        assert counter.live == 8000


def test_a_peak_inside_a_function_is_seen_and_located():
    def peak_inside():
        a = torch.ones(1000, 1000)
        b = a * 2.0
        return b.sum()

    with LiveStorages(library_dirs=HERE) as counter:
        counter.phase = "here"
        total = peak_inside()
    assert counter.live == 4  # the sum alone
    assert counter.peak == 8_000_004  # a, b and the sum, at the sum
    assert counter.where == "here: peak_inside (test_memory_peak.py), aten.sum"
    del total


def test_what_autograd_saves_counts_until_the_backward_frees_it():
    w = torch.randn(1000, 1000, requires_grad=True)
    with LiveStorages(locate=False) as counter:
        y = (w * 2.0).tanh().sum()  # tanh saves its output for the backward; the product is freed
        assert counter.live == 4_000_004
        y.backward()
        assert counter.live == 4_000_004  # the saved output freed, w.grad allocated
        del y
        assert counter.live == 4_000_000
        w.grad = None
        assert counter.live == 0


def test_the_window_starts_with_the_tensors_alive_except_parameters_buffers_and_optimiser_state():
    model = torch.nn.Sequential(torch.nn.Linear(500, 500), torch.nn.BatchNorm1d(500))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 500)).sum().backward()
    optimizer.step()
    gc.collect()
    without = LiveStorages(locate=False)
    start_window(without)
    kept = torch.empty(250_000)
    with_one = LiveStorages(locate=False)
    start_window(with_one)
    assert with_one.live - without.live == 1_000_000
    assert with_one.peak == with_one.live
    counted = with_one.live
    # the gradients count (every update sets them to None before its backward, so they are update memory)
    grads = sum(p.grad.nbytes for p in model.parameters())
    for p in model.parameters():
        p.grad = None
    gc.collect()
    no_grads = LiveStorages(locate=False)
    start_window(no_grads)
    assert counted - no_grads.live == grads
    del kept


@pytest.mark.parametrize("shared", [True, False])
def test_statistics_of_a_shared_state_do_not_expand_it_to_the_agents(shared):
    """8 agents' statistics of one state ``(T, 1, N, S)`` with each agent's own mask: the temporaries stay within a
    quarter of the state (a G-fold float64 copy would be 16 times the state)."""
    G, T, N, S = 8, 16, 64, 64
    x = torch.randn(T, 1 if shared else G, N, S)
    mask = torch.rand(T, G, N, 1) > 0.2
    with LiveStorages(locate=False) as counter:
        preprocessors.per_agent_moments(x, mask, agents=G, agent_dim=1, chunk_elements=1024)
    assert counter.peak <= x.nbytes // 4 + mask.nbytes // 4 + 16 * G * S * 8, (counter.peak, x.nbytes)
