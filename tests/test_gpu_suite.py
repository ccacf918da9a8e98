"""``benchmarks/gpu_suite.py``, the GPU figures in one command: its ``--smoke`` mode (every step at tiny sizes on the
CPU) measures, writes a row per measurement and regenerates the pages from them; a run cut short keeps what it had
and marks the rest. The suite writes only under ``tmp_path`` (``--results``: a copy of the files of
``docs/results`` it touches)."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUITE = os.path.join(REPO, "benchmarks", "gpu_suite.py")
STEPS = {"compiled", "scaling", "memory", "vmas", "maddpg"}
TABLES = ("gpu_compiled", "gpu_agent_scaling", "gpu_memory", "gpu_vmas", "gpu_maddpg")


def _results(tmp_path):
    """A results folder with what the report reads and rewrites: not_measured.md and its data file."""
    results = tmp_path / "results"
    (results / "data").mkdir(parents=True)
    shutil.copy(os.path.join(REPO, "docs", "results", "not_measured.md"), results)
    shutil.copy(os.path.join(REPO, "docs", "results", "data", "gpu_targets.csv"), results / "data")
    return results


def _suite(*args, results) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": REPO}
    command = [sys.executable, SUITE, "--results", str(results), *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, cwd=REPO)


def _rows(path) -> list[dict[str, str]]:
    with open(path) as file:
        return list(csv.DictReader(line for line in file if not line.startswith("#")))


def test_smoke_runs_every_step_and_regenerates_the_pages(tmp_path):
    results = _results(tmp_path)
    done = _suite("--smoke", results=results)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = _rows(results / "data" / "gpu_suite_runs.csv")
    assert {row["step"] for row in rows} == STEPS
    vmas_missing = "skipped: vmas is not installed"
    assert all(row["status"] == "ok" or row["status"] == vmas_missing for row in rows), rows
    assert all(float(row["frames/s"]) > 0 for row in rows if row["status"] == "ok"), rows
    memory = [row for row in rows if row["step"] == "memory"]
    assert all(float(row["stored MiB"]) > 0 for row in memory)  # both agents' rollout tensors counted
    page = (results / "gpu.md").read_text()
    for name in TABLES:
        assert f"<!-- table: {name} -->\n\n| " in page, name  # make_tables.py filled each table in
        assert (results / "data" / f"{name}.csv").is_file()
    targets = _rows(results / "data" / "gpu_targets.csv")
    measured = {row["target"] for row in targets if row["result"].startswith("measured")}
    assert {"39.4 (GPU)", "2 (H100)", "13 (GPU)", "5", "4 (GPU)"} <= measured
    check = [sys.executable, os.path.join(REPO, "docs", "results", "make_tables.py"), "--root", str(results), "--check"]
    assert subprocess.run(check, capture_output=True).returncode == 0  # the pages are what the data files give


@pytest.mark.parametrize(
    ("args", "status"),
    [
        (["--budget", "0"], "not measured: the suite's time ran out"),
        (["--limit", "0.5"], "not measured: its process was stopped after 0 s"),
    ],
)
def test_a_run_cut_short_keeps_a_row_for_every_measurement(args, status, tmp_path):
    # --budget 0: no process starts; --limit 0.5: each is stopped before its first row (imports alone take longer)
    results = _results(tmp_path)
    done = _suite("--smoke", *args, results=results)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = _rows(results / "data" / "gpu_suite_runs.csv")
    assert {row["step"] for row in rows} == STEPS
    assert {row["status"] for row in rows} == {status}
    assert "| not measured" in (results / "gpu.md").read_text()  # the pages say so
