"""``benchmarks/learning_study.py``: its CSV rows are appended whole (a kill leaves no half row), and its MaMuJoCo
runs (the shipped HARL configs, per-variant envs, deterministic evaluation) plan, train and report."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest
from helpers import one_thread  # noqa: F401  (autouse: one torch thread)

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def study(monkeypatch):
    """The module, with ``benchmarks/`` on the path while the test runs (its report imports ``bench_common``)."""
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import learning_study

    yield learning_study
    sys.modules.pop("learning_study", None)


def _row(study, **values):
    row = dict.fromkeys(study.COLUMNS, "0")
    row.update(task="vmas:balance", algo="mappo", config_hash="abc", tag="", curve='{"frames":[1],"returns":[2]}')
    row.update(values)
    return row


def test_a_row_cut_short_is_not_read_and_is_cut_off_before_the_next(study, tmp_path):
    path = str(tmp_path / "rows.csv")
    study.append_row(path, _row(study, seed="0"))
    study.append_row(path, _row(study, seed="1"))
    whole = Path(path).read_bytes()
    Path(path).write_bytes(whole + whole.splitlines(keepends=True)[-1][:25])  # a kill in the middle of a write
    assert [row["seed"] for row in study.read_rows(path)] == ["0", "1"]
    study.append_row(path, _row(study, seed="2"))
    assert [row["seed"] for row in study.read_rows(path)] == ["0", "1", "2"]
    assert Path(path).read_bytes().startswith(whole) and Path(path).read_bytes().count(b"\n") == 4


def test_rows_with_and_without_evaluation_go_to_csvs_of_their_own(study, tmp_path):
    path = str(tmp_path / "rows.csv")
    study.append_row(path, _row(study, eval_return="1", eval_curve="{}", eval_seconds="0", cpu_seconds="0"))
    with open(path, newline="") as file:
        assert tuple(next(csv.reader(file))) == study.COLUMNS + study.EVAL_COLUMNS
    with pytest.raises(SystemExit, match="use another --csv"):
        study.append_row(path, _row(study))


def test_mamujoco_tasks_take_the_shipped_harl_configs(study):
    args = study.parse_args(["--tasks", ",".join(study.MAMUJOCO_TASKS), "--seeds", "0", "--frames", "2000000"])
    assert args.csv == study.MAMUJOCO_CSV and args.algos == list(study.MAMUJOCO_ALGOS)
    jobs = {(job["task"], job["algo"]): job for job in study.plan(args)}
    assert all(job["frames"] == 2_000_000 for job in jobs.values())
    happo, maddpg = jobs["mamujoco:HalfCheetah-2x3", "happo"], jobs["mamujoco:HalfCheetah-2x3", "maddpg"]
    assert (happo["num_envs"], maddpg["num_envs"]) == (20, 10)  # HARL's rollout threads
    assert happo["config"]["models"]["team_critic"] and happo["env_kwargs"] == {"agent_obsk": 0}
    assert jobs["mamujoco:HalfCheetah-2x3", "mappo"]["config"]["models"]["share_across_agents"]
    assert not jobs["mamujoco:HalfCheetah-2x3", "mappo-own"]["config"]["models"]["share_across_agents"]
    ippo = jobs["mamujoco:HalfCheetah-2x3", "ippo"]["config"]
    assert ippo["agent"]["class"] == "IPPO" and ippo["models"]["value"]["input"] == "observations"
    walker = jobs["mamujoco:Walker2d-2x3", "happo"]["config"]["agent"]  # HARL's Walker2d values, lr decay to 0
    assert (walker["learning_epochs"], walker["mini_batches"], walker["learning_rate"]) == (5, 2, 1e-3)
    assert walker["learning_rate_scheduler_kwargs"]["total_iters"] == 100_000 // 200 * 5
    assert jobs["mamujoco:HalfCheetah-6x1", "happo"]["config"]["agent"]["learning_epochs"] == 15
    assert len({job["config_hash"] for job in jobs.values()}) == len(jobs)
    assert study.evaluation_steps(timesteps=100_000, points=20)[::19] == [5000, 100_000]
    # elsewhere the names keep their meaning: "mappo" is the on-policy builder with the CLI's defaults
    assert study.variants_for("vmas:balance")["mappo"].builder == "on_policy"
    with pytest.raises(SystemExit):
        study.parse_args(["--tasks", "vmas:balance", "--algos", "mappo-own"])


def test_a_mamujoco_run_writes_its_evaluation_and_the_report_draws_it(study, tmp_path, capsys):
    path = str(tmp_path / "mamujoco.csv")
    argv = ["--tasks", "mamujoco:HalfCheetah-2x3", "--algos", "mappo", "--seeds", "0", "--timesteps", "8"]
    argv += ["--eval-episodes", "2", "--eval-points", "2", "--csv", path, "--in-process", "--bins", "2"]
    assert study.main(argv) == 0
    (row,) = study.read_rows(path)
    curve = json.loads(row["eval_curve"])
    assert curve["frames"] == [80, 160] and curve["episodes"] == 2 and len(curve["returns"]) == 2
    assert float(row["eval_return"]) == curve["returns"][-1] and float(row["cpu_seconds"]) >= 0.0
    assert study.main(argv) == 0 and len(study.read_rows(path)) == 1  # done runs are skipped
    assert study.main(["--report", "--csv", path, "--images-dir", str(tmp_path)]) == 0
    assert "| mappo | 1 | 20 |" in capsys.readouterr().out
    assert (tmp_path / "learning_mamujoco-HalfCheetah-2x3.png").is_file()


def _mamujoco_argv(path, algo, timesteps, points):
    argv = ["--tasks", "mamujoco:HalfCheetah-2x3", "--algos", algo, "--seeds", "0", "--timesteps", str(timesteps)]
    return argv + ["--eval-episodes", "1", "--eval-points", str(points), "--csv", str(path), "--bins", "2"]


def test_a_run_held_by_another_process_is_skipped_and_runs_once_it_is_free(study, tmp_path, capsys):
    from skrl_marl_ext.cli.run_folder import RunLock

    path = tmp_path / "mamujoco.csv"
    argv = _mamujoco_argv(path, "maddpg", 8, 2) + ["--in-process"]
    (job,) = study.plan(study.parse_args(argv))
    folder = Path(study.run_folder(job))
    assert folder.parent == tmp_path / "runs"  # the default --work-dir: runs/ beside the CSV
    folder.mkdir(parents=True)
    with RunLock(str(folder), option="test"):
        assert study.main(argv) == 0
    assert "skip mamujoco:HalfCheetah-2x3 maddpg seed 0" in capsys.readouterr().out
    assert study.read_rows(str(path)) == []
    assert study.main(argv) == 0
    (row,) = study.read_rows(str(path))
    assert json.loads(row["eval_curve"])["frames"] == [40, 80] and "resumed_at_frames" not in row["curve"]
    assert not folder.exists()  # the run's state goes once its row is written


@pytest.mark.slow
def test_a_killed_run_goes_on_from_its_last_kept_state(study, tmp_path, capsys):
    """A run killed after an evaluation point that ended a rollout goes on from there at the next study: one row,
    every evaluation point, the frames it was resumed at, its folder gone."""
    import subprocess
    import time

    path = tmp_path / "mamujoco.csv"
    argv = _mamujoco_argv(path, "mappo", 600, 3) + ["--in-process"]  # rollouts of 200 steps: kept at 200 and 400
    (job,) = study.plan(study.parse_args(argv))
    progress = Path(study.run_folder(job)) / study.RunState.PROGRESS
    script = str(REPO / "benchmarks" / "learning_study.py")
    log = tmp_path / "study.log"
    with open(log, "wb") as output:
        process = subprocess.Popen([sys.executable, script, *argv], stdout=output, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while not progress.is_file() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        ended = process.poll()
    finally:
        process.kill()  # SIGKILL: no clean-up runs
        process.wait()
    assert ended is None and progress.is_file(), (
        f"ended with {ended}, state kept: {progress.is_file()}: " + (log.read_text()[-2000:])
    )
    kept = json.loads(progress.read_text())["step"]
    assert kept in (200, 400) and study.read_rows(str(path)) == []

    assert study.main(argv) == 0
    (row,) = study.read_rows(str(path))
    assert json.loads(row["eval_curve"])["frames"] == [4000, 8000, 12000]
    assert json.loads(row["curve"])["resumed_at_frames"] == [kept * 20]
    assert float(row["wall_seconds"]) > 0 and float(row["cpu_seconds"]) > 0
    assert not progress.parent.exists()
    assert study.main(argv) == 0 and len(study.read_rows(str(path))) == 1  # done: skipped
    capsys.readouterr()
    assert study.main(["--report", "--csv", str(path), "--images-dir", str(tmp_path)]) == 0
    assert f"resumed after a kill (new episodes from there): mappo seed 0 at {kept * 20}." in (capsys.readouterr().out)


def test_welch_test_equals_its_closed_form_and_scipy(study):
    from bench_common import welch_test

    # two samples of 2 with equal variances: 2 degrees of freedom, where p = 1 - |t| / sqrt(t^2 + 2)
    t, df, p = welch_test([0.0, 2.0], [2.0, 4.0])
    assert t == pytest.approx(-(2**0.5), rel=1e-12) and df == pytest.approx(2.0, rel=1e-12)
    assert p == pytest.approx(1.0 - 2**0.5 / 2.0, rel=1e-12)
    # Walker2d's happo against mappo; scipy.stats.ttest_ind(a, b, equal_var=False) gives these
    t, df, p = welch_test([4072, 4493, 4678, 7083, 5522], [1292, 4066, 3846, 4554, 1862])
    assert (t, df, p) == pytest.approx((2.436975508611572, 7.714090179130802, 0.041838242485310775), rel=1e-9)
    assert welch_test([1.0, 1.0], [1.0, 1.0])[2] == 1.0 and welch_test([1.0, 1.0], [2.0, 2.0])[2] == 0.0
    with pytest.raises(ValueError, match="at least 2 values"):
        welch_test([1.0], [1.0, 2.0])


def test_the_mamujoco_report_tests_happo_against_each_variant(study, tmp_path, capsys):
    path = str(tmp_path / "mamujoco.csv")
    returns = {"happo": [4072, 4493, 4678, 7083, 5522], "mappo": [1292, 4066, 3846, 4554, 1862]}
    for algo, values in returns.items():
        for seed, value in enumerate(values):
            curve = json.dumps({"frames": [1000, 2000], "returns": [value / 2, value], "episodes": 10})
            row = _row(study, task="mamujoco:HalfCheetah-2x3", algo=algo, seed=str(seed), frames="2000", curve=curve)
            row.update(num_envs="20", eval_return=str(value), eval_curve=curve, eval_seconds="1", cpu_seconds="1")
            study.append_row(path, row)
    assert study.main(["--report", "--csv", path, "--images-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert (
        "happo's eval return against each (Welch's t-test over seeds, two-sided): mappo t = 2.44, df = 7.7, p = 0.04."
        in out
    )


def test_a_report_of_some_variants_writes_their_table_and_plot_for_the_results_page(study, tmp_path, capsys):
    path = str(tmp_path / "study.csv")
    for algo, values in {"mappo": [30, 32], "masac": [20, 22], "ippo": [10, 12]}.items():
        for seed, value in enumerate(values):
            curve = json.dumps({"frames": [1000, 2000], "returns": [value / 2, value]})
            row = _row(study, algo=algo, seed=str(seed), frames="2000", num_envs="10", curve=curve)
            row.update(final_return=str(value), first_return=str(value / 2), wall_seconds="5", date="2026-11-29 00:00")
            study.append_row(path, row)
    study.append_row(path, _row(study, algo="masac", tag="other", frames="2000", num_envs="10", final_return="99"))
    data = tmp_path / "offpolicy_balance.csv"
    args = ["--report", "--tasks", "vmas:balance", "--only", "mappo,masac", "--frames", "2000", "--csv", path]
    assert study.main([*args, "--data", str(data), "--images-dir", str(tmp_path)]) == 0
    lines = data.read_text().splitlines()
    assert lines[0].startswith("# command: ") and "--only mappo,masac" in data.read_text()
    table = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    assert [(r["algo"], r["n"], r["final return"]) for r in table] == [("mappo", "2", "31.00"), ("masac", "2", "21.00")]
    assert (tmp_path / "offpolicy_balance.png").is_file()  # the plot named after the data file, not the task's
    assert not (tmp_path / "learning_vmas-balance.png").exists()
