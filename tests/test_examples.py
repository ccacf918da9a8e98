"""The example scripts run end to end (a few steps each), so they cannot rot unnoticed."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples")


@pytest.mark.parametrize(
    ("script", "extra"),
    [("vmas_balance_mappo.py", "vmas"), ("mpe_spread_ippo.py", "mpe2"), ("mpe_spread_maddpg.py", "mpe2")],
)
def test_example_runs(script, extra, tmp_path):
    pytest.importorskip(extra)
    command = [sys.executable, os.path.join(EXAMPLES, script), "--timesteps", "40", "--num-envs", "4"]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "mean return per agent" in result.stdout


def test_quickstart_prints_its_result(tmp_path):
    command = [sys.executable, os.path.join(EXAMPLES, "quickstart.py"), "--timesteps", "40", "--num-envs", "4"]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    last = result.stdout.strip().splitlines()[-1]
    number = r"-?\d+\.\d"
    assert re.fullmatch(
        rf"quickstart result: mean return per agent over 4 deterministic episodes: trained {number} "
        rf"\(agent_0 {number}, agent_1 {number}, agent_2 {number}\) vs random actions {number} \(closer to 0 is better\)",
        last,
    ), last
    assert (tmp_path / "runs" / "quickstart").is_dir()  # its logs land in the working directory it ran in
