"""Nothing a run writes is lost: kills mid-write, a full disk, Ctrl-C and SIGTERM, SIGKILL, damaged files, two
processes on one run folder, two runs started in the same second."""

from __future__ import annotations

import contextlib
import errno
import io
import json
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
from helpers import make_agent, make_models, one_thread, spread  # noqa: F401  (one_thread: autouse)

from skrl_marl_ext import cli
from skrl_marl_ext.checkpoints import read_checkpoint
from skrl_marl_ext.checkpoints.files import WriteError, write_atomic

SPREAD = ["--env", "builtin:spread", "--num-envs", "4", "--no-progress"]


def _train(tmp_path, *extra) -> str:
    assert cli.main(["train", *SPREAD, "--out", str(tmp_path), *extra]) == 0
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    return str(run_dir)


def _run(run_dir) -> dict:
    with open(os.path.join(run_dir, "run.json")) as file:
        return json.load(file)


def _steps(path) -> set[int]:
    return {m["progress"]["timestep"] for m in read_checkpoint(path, map_location="cpu").values()}


def _named_files(folder) -> list[str]:
    """The files under a name of their own (not a temporary file of a write)."""
    return sorted(n for n in os.listdir(folder) if not n.startswith("."))


def _start(tmp_path, *argv) -> subprocess.Popen:
    """``python -m skrl_marl_ext ARGV`` in its own process (cwd ``tmp_path``)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "skrl_marl_ext", *argv]
    return subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(condition, *, timeout=120.0, what="") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _checkpointed(run_dir, at_least=1) -> bool:
    """Whether the run's ``run.json`` records a checkpoint of step ``at_least`` or later."""
    try:
        run = _run(run_dir)
    except (OSError, ValueError):
        return False
    return run.get("checkpoint") is not None and run.get("step", 0) >= at_least


# ---------------------------------------------------------------------------------------------------- writes


def _write_forever(agent, folder) -> None:
    """Write checkpoints as fast as possible: ``save()`` over three names and the trainer's numbered checkpoints."""
    for step in range(1, 10**9):
        agent.save(os.path.join(folder, f"saved_{step % 3}.pt"))
        agent.write_checkpoint(timestep=step, timesteps=10**9)


@pytest.mark.slow  # other processes
@pytest.mark.skipif(sys.platform != "linux", reason="forks the writer (Linux)")
def test_sigkill_during_writes_leaves_every_named_checkpoint_whole(tmp_path):
    """A writer killed at random moments never leaves a damaged file under a checkpoint's name."""
    env = spread(num_envs=4)
    models = make_models(env, hidden=(256, 256))  # a file of about 1.5 MB: a kill often lands inside a write
    agent = make_agent(env, models=models, cfg={"experiment": {"directory": str(tmp_path), "experiment_name": "w"}})
    folder = os.path.join(tmp_path, "w", "checkpoints")
    os.makedirs(folder, exist_ok=True)
    agent.experiment_dir = os.path.join(tmp_path, "w")
    context = multiprocessing.get_context("fork")
    rng = random.Random(0)
    for _ in range(10):
        writer = context.Process(target=_write_forever, args=(agent, folder))
        writer.start()
        time.sleep(rng.uniform(0.2, 0.8))
        os.kill(writer.pid, signal.SIGKILL)
        writer.join()
        names = _named_files(folder)
        assert names, "the writer wrote nothing before it was killed"
        for name in names:
            read_checkpoint(os.path.join(folder, name), map_location="cpu")  # raises on a damaged file
    agent.load(os.path.join(folder, "saved_0.pt"))


@contextlib.contextmanager
def _full_disk(folder):
    """``folder`` on a disk with 64 KiB free: a small tmpfs where this machine can mount one, else a folder whose
    writes fail with ENOSPC once 64 KiB are written (the fault a full disk gives a write)."""
    os.makedirs(folder)
    mount = ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", folder]
    if sys.platform == "linux" and os.geteuid() == 0 and subprocess.run(mount, capture_output=True).returncode == 0:
        try:
            free = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize
            with open(os.path.join(folder, "filler"), "wb") as filler:
                filler.write(b"\0" * (free - 64 * 1024))
            yield "tmpfs"
        finally:
            subprocess.run(["umount", "-l", folder], check=False)
        return
    real_fdopen, written = os.fdopen, [0]

    class FullFile(io.FileIO):
        def write(self, data):
            written[0] += len(data)
            if written[0] > 64 * 1024:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return super().write(data)

    def fdopen(fd, mode="r", *args, **kwargs):
        if "w" in mode and os.path.realpath(os.readlink(f"/proc/self/fd/{fd}")).startswith(os.path.realpath(folder)):
            written[0] = 0
            return io.BufferedWriter(FullFile(fd, "wb"))
        return real_fdopen(fd, mode, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "fdopen", fdopen)
        yield "injected ENOSPC"


def test_save_on_a_full_disk_keeps_the_old_checkpoint(tmp_path):
    env = spread(num_envs=4)
    small = make_agent(env)
    big = make_agent(env, models=make_models(env, hidden=(256, 256)))  # does not fit in 64 KiB
    disk = os.path.join(tmp_path, "disk")
    with _full_disk(disk):
        path = os.path.join(disk, "agent.pt")
        small.save(path)
        before = open(path, "rb").read()
        with pytest.raises(WriteError) as caught:
            big.save(path)
        message = str(caught.value)
        assert len(message.splitlines()) == 1 and path in message and "No space left on device" in message
        assert open(path, "rb").read() == before and _named_files(disk) in (["agent.pt"], ["agent.pt", "filler"])
        assert not [n for n in os.listdir(disk) if n.endswith(".tmp")]
        small.load(path)


def test_a_full_disk_stops_a_cli_run_with_one_line(tmp_path, capsys):
    disk = os.path.join(tmp_path, "disk")
    with _full_disk(disk):
        argv = ["train", *SPREAD, "--out", disk, "--timesteps", "40", "agent.experiment.checkpoint_interval=20"]
        argv += ["models.policy.hidden_sizes=[256,256]"]
        assert cli.main(argv) == 1
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "No space left on device" in err and "cannot write" in err, err
        assert "Traceback" not in err


# ---------------------------------------------------------------------------------------------------- stops


@pytest.mark.slow  # other processes
def test_ctrl_c_then_resume_and_eval(tmp_path):
    """Ctrl-C writes a checkpoint of the step reached and a run.json that --resume and eval read."""
    out = os.path.join(tmp_path, "runs")
    run = _start(tmp_path, "train", *SPREAD, "--out", out, "--timesteps", "100000")
    _wait_for(lambda: os.path.isdir(out) and os.listdir(out), what="the run folder")
    (run_dir,) = [os.path.join(out, n) for n in os.listdir(out)]
    _wait_for(lambda: os.path.isfile(os.path.join(run_dir, "run.json")), what="run.json")
    time.sleep(1.0)
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 130, err
    line = [row for row in err.splitlines() if row.startswith("skrl-marl train")]
    assert len(line) == 1 and "stopped by SIGINT at step" in line[0] and "--resume" in line[0], err
    assert "Traceback" not in err
    record = _run(run_dir)
    assert record["status"] == "stopped" and 0 < record["step"] < 100000
    assert _steps(record["checkpoint"]) == {record["step"]}

    assert cli.main(["eval", "--checkpoint", run_dir, "--episodes", "2"]) == 0  # the newest checkpoint
    stopped_at = record["step"]
    assert cli.main(["train", "--resume", run_dir, "--timesteps", str(stopped_at + 20), "--no-progress"]) == 0
    record = _run(run_dir)
    assert record["status"] == "finished" and record["timesteps"] == stopped_at + 20
    assert _steps(os.path.join(run_dir, "checkpoints", "final.pt")) == {stopped_at + 20}


@pytest.mark.slow  # other processes
def test_sigkill_then_resume_from_the_newest_intact_checkpoint(tmp_path, capsys):
    out = os.path.join(tmp_path, "runs")
    argv = ["train", *SPREAD, "--out", out, "--timesteps", "100000", "agent.experiment.checkpoint_interval=10"]
    run = _start(tmp_path, *argv)
    _wait_for(lambda: os.path.isdir(out) and os.listdir(out), what="the run folder")
    (run_dir,) = [os.path.join(out, n) for n in os.listdir(out)]
    _wait_for(lambda: _checkpointed(run_dir, 20), what="a checkpoint")
    run.kill()
    run.communicate(timeout=60)
    checkpoints = os.path.join(run_dir, "checkpoints")
    newest = max(int(n[6:-3]) for n in os.listdir(checkpoints) if n.startswith("agent_"))
    # the newest file damaged (a disk that failed, a copy cut short): skipped with one warning naming it
    path = os.path.join(checkpoints, f"agent_{newest}.pt")
    with open(path, "r+b") as file:
        file.truncate(os.path.getsize(path) // 2)
    assert cli.main(["train", "--resume", run_dir, "--timesteps", str(newest + 10)]) == 0
    captured = capsys.readouterr()
    warnings = [row for row in captured.err.splitlines() if "warning" in row]
    assert len(warnings) == 1 and f"agent_{newest}.pt" in warnings[0] and "damaged" in warnings[0]
    assert f"resumed from step {newest - 10} of {newest + 10}" in captured.out
    # the bar counts the run's steps, from the step resumed at
    assert f"{newest + 10}/{newest + 10}" in captured.out and f" 0/{20}" not in captured.out
    assert _steps(os.path.join(checkpoints, "final.pt")) == {newest + 10}


def test_resume_from_a_named_checkpoint_and_damaged_run_json(tmp_path, capsys):
    run_dir = _train(tmp_path, "--timesteps", "60", "agent.experiment.checkpoint_interval=20")
    assert cli.main(["train", "--resume", run_dir, "--from", "20", "--timesteps", "40"]) == 0
    assert "resumed from step 20 of 40" in capsys.readouterr().out
    checkpoint = os.path.join(run_dir, "checkpoints", "agent_20.pt")
    assert cli.main(["train", "--resume", checkpoint, "--timesteps", "30"]) == 0  # a checkpoint names its run
    assert "resumed from step 20 of 30" in capsys.readouterr().out
    assert cli.main(["train", "--resume", run_dir, "--from", "25"]) == 2
    assert "no checkpoint of step 25" in capsys.readouterr().err
    assert cli.main(["train", "--resume", run_dir, "--timesteps", "10"]) == 2
    assert "pass --timesteps N with N > 30" in capsys.readouterr().err
    with open(os.path.join(run_dir, "run.json"), "r+") as file:
        file.truncate(100)
    for argv in (["train", "--resume", run_dir], ["eval", "--checkpoint", run_dir]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "run.json is damaged" in err and "Traceback" not in err


def test_episodes_csv_cut_by_a_kill_or_damaged_resumes_with_its_whole_rows(tmp_path, capsys):
    """episodes.csv is appended as episodes end: a kill can cut its last row, which --resume drops; a damaged line is
    left out with one warning naming the file and the line."""
    argv = ["--timesteps", "60", "--env-arg", "episode_length=10", "agent.experiment.checkpoint_interval=20"]
    run_dir = _train(tmp_path, *argv)
    path = os.path.join(run_dir, "episodes.csv")
    with open(path, newline="") as file:
        lines = file.readlines()
    assert lines[0] == "step,frames,agent_0,agent_1,agent_2\r\n" and len(lines) == 1 + 6 * 4  # 6 episodes of 4 envs
    lines[3] = "garbage\r\n"
    with open(path, "w", newline="") as file:
        file.writelines([*lines, "70,280,-3.5"])  # a row cut short by a kill: no line end, agents missing
    capsys.readouterr()
    assert cli.main(["train", "--resume", run_dir, "--timesteps", "80", "--no-progress"]) == 0
    captured = capsys.readouterr()
    warnings = [row for row in captured.err.splitlines() if "warning" in row]
    assert len(warnings) == 1 and f"{path}: line 4 is damaged" in warnings[0], captured.err
    with open(path, newline="") as file:
        resumed = file.readlines()
    assert resumed[:24] == lines[:3] + lines[4:]  # every whole row up to step 60, as it was
    assert [row.split(",")[0] for row in resumed[24:]] == ["70"] * 4 + ["80"] * 4
    assert any("last 10% of episodes" in line for line in captured.out.splitlines())


def test_export_and_eval_take_a_run_folder_or_a_checkpoint(tmp_path, capsys):
    run_dir = _train(tmp_path, "--timesteps", "40", "agent.experiment.checkpoint_interval=20")
    for source in (run_dir, os.path.join(run_dir, "checkpoints", "agent_20.pt")):
        target = os.path.join(tmp_path, "play.pt")
        assert cli.main(["export", source, "--out", target]) == 0
        read_checkpoint(target)
        assert cli.main(["eval", "--checkpoint", source, "--episodes", "1"]) == 0
    missing = os.path.join(tmp_path, "nothing")
    for argv in (["export", missing, "--out", target], ["eval", "--checkpoint", missing]):
        assert cli.main(argv) == 2
        assert f"{missing} does not exist" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------------- processes


@pytest.mark.slow  # other processes
def test_one_process_per_run_folder(tmp_path, capsys):
    """A second --resume of a run being trained is refused naming the process; SIGTERM ends the first cleanly."""
    run_dir = _train(tmp_path, "--timesteps", "20")
    first = _start(tmp_path, "train", "--resume", run_dir, "--timesteps", "100000", "--no-progress")
    lock = os.path.join(run_dir, "train.lock")
    _wait_for(lambda: f"process {first.pid} " in open(lock).read(), what="the first process's lock")
    assert cli.main(["train", "--resume", run_dir, "--timesteps", "100000"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"process {first.pid} " in err and "being trained by" in err

    first.send_signal(signal.SIGTERM)
    _, first_err = first.communicate(timeout=60)
    assert first.returncode == 143 and "stopped by SIGTERM" in first_err, first_err
    # the lock went with its process: the run goes on
    stopped = _run(run_dir)["step"]
    assert cli.main(["train", "--resume", run_dir, "--timesteps", str(stopped + 4), "--no-progress"]) == 0
    assert [r["from_step"] for r in _run(run_dir)["resumed"]] == [20, stopped]


@pytest.mark.slow  # other processes
def test_a_killed_process_leaves_no_lock_behind(tmp_path):
    run_dir = _train(tmp_path, "--timesteps", "20")
    holder = _start(tmp_path, "train", "--resume", run_dir, "--timesteps", "100000", "--no-progress")
    lock = os.path.join(run_dir, "train.lock")
    _wait_for(lambda: f"process {holder.pid} " in open(lock).read(), what="the lock")
    holder.kill()
    holder.communicate(timeout=60)
    assert f"process {holder.pid} " in open(lock).read()  # the file stays, the lock does not
    assert cli.main(["train", "--resume", run_dir, "--timesteps", "24", "--no-progress"]) == 0
    assert f"process {os.getpid()} " in open(lock).read()


def test_two_runs_started_in_the_same_second_get_two_folders(tmp_path, monkeypatch):
    monkeypatch.setattr(time, "strftime", lambda *args: "26-01-01_00-00-00")  # the second both runs start in
    for _ in range(2):
        assert cli.main(["train", *SPREAD, "--out", str(tmp_path), "--timesteps", "20"]) == 0
    folders = sorted(p.name for p in tmp_path.iterdir())
    assert folders == ["26-01-01_00-00-00_mappo_builtin-spread", "26-01-01_00-00-00_mappo_builtin-spread-2"]
    for name in folders:
        run = _run(tmp_path / name)
        assert run["status"] == "finished" and run["config"]["agent"]["experiment"]["experiment_name"] == name
        assert os.path.isfile(tmp_path / name / "checkpoints" / "final.pt")


def test_a_run_that_fails_before_its_first_step_leaves_no_folder(tmp_path, capsys):
    argv = ["train", *SPREAD, "--out", str(tmp_path / "runs"), "--timesteps", "20", "agent.rollouts=0"]
    assert cli.main(argv) == 2
    assert "rollouts" in capsys.readouterr().err and list(tmp_path.iterdir()) == []  # no run folder, no runs/


def test_errors_during_a_run_are_one_line_and_debug_shows_the_traceback(tmp_path, capsys):
    disk = os.path.join(tmp_path, "disk")
    with _full_disk(disk):
        argv = ["train", *SPREAD, "--out", disk, "--timesteps", "40", "agent.experiment.checkpoint_interval=20"]
        argv += ["models.policy.hidden_sizes=[256,256]"]
        assert cli.main([*argv, "--debug"]) == 1
        err = capsys.readouterr().err
        assert "Traceback" in err and err.strip().splitlines()[-1].startswith("skrl-marl train: error: cannot write")


# ---------------------------------------------------------------------------------------------------- run folders


def _train_and_interrupt(out, at_step, *extra) -> tuple[str, int]:
    """Train a long run in this process and send it SIGINT (a stop mid-way, as Ctrl-C gives) once its ``run.json``
    records a checkpoint of step ``at_step`` or later; return the run folder and the step it stopped at."""

    def watch():
        try:
            _wait_for(lambda: os.path.isdir(out) and os.listdir(out), what="the run folder")
            (run_dir,) = [os.path.join(out, n) for n in os.listdir(out)]
            _wait_for(lambda: _checkpointed(run_dir, at_step), what="a checkpoint")
        finally:  # also when waiting failed: the run must end
            os.kill(os.getpid(), signal.SIGINT)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert cli.main(["train", *SPREAD, "--out", str(out), "--timesteps", "100000", *extra]) == 130
    watcher.join()
    (run_dir,) = [os.path.join(out, n) for n in os.listdir(out)]
    return run_dir, _run(run_dir)["step"]


def _copy_in_name_order(source, target) -> None:
    """Copy a run folder file by file in name order, each copy getting the time it was made (as ``rsync -r`` without
    ``-t``, a cloud sync or a restore from backup do): the file copied last is the newest."""
    stamp = time.time() - 10_000
    for root, folders, files in os.walk(source):
        folders.sort()
        here = os.path.join(target, os.path.relpath(root, source))
        os.makedirs(here)
        for name in sorted(files):
            shutil.copyfile(os.path.join(root, name), os.path.join(here, name))
            os.utime(os.path.join(here, name), (stamp, stamp))
            stamp += 1


def _contents(folder) -> dict[str, bytes]:
    return {n: open(os.path.join(folder, n), "rb").read() for n in _named_files(folder) if n.endswith(".pt")}


def test_a_copied_run_resumes_from_its_own_last_step_and_overwrites_nothing(tmp_path):
    """A run stopped mid-way and copied with new file times (``agent_90.pt`` copied after ``agent_100.pt``) goes on from
    the checkpoint its ``run.json`` records, and no checkpoint of the copy is overwritten."""
    run_dir, stopped = _train_and_interrupt(tmp_path / "runs", 100, "agent.experiment.checkpoint_interval=10")
    copy = os.path.join(tmp_path, "copy")
    _copy_in_name_order(run_dir, copy)
    checkpoints = os.path.join(copy, "checkpoints")
    before = _contents(checkpoints)
    assert f"agent_{stopped}.pt" in before and "agent_90.pt" in before
    assert cli.main(["train", "--resume", copy, "--timesteps", str(stopped + 5), "--no-progress"]) == 0
    record = _run(copy)
    assert record["resumed"][-1]["from_step"] == stopped
    assert os.path.basename(record["resumed"][-1]["checkpoint"]) == f"agent_{stopped}.pt"
    assert _steps(os.path.join(checkpoints, "final.pt")) == {stopped + 5}
    after = _contents(checkpoints)
    assert {name: after[name] for name in before if name != "final.pt"} == before  # none overwritten


def test_resume_from_an_earlier_step_sets_the_later_checkpoints_aside(tmp_path, capsys):
    run_dir = _train(tmp_path, "--timesteps", "40", "agent.experiment.checkpoint_interval=10")
    checkpoints = os.path.join(run_dir, "checkpoints")
    before = _contents(checkpoints)
    capsys.readouterr()
    assert cli.main(["train", "--resume", run_dir, "--from", "20", "--timesteps", "30", "--no-progress"]) == 0
    err = capsys.readouterr().err.strip()
    aside = os.path.join(checkpoints, "superseded_1")
    assert len(err.splitlines()) == 1 and aside in err and "agent_30.pt" in err and "final.pt" in err, err
    assert _contents(aside) == {name: before[name] for name in ("agent_30.pt", "agent_40.pt", "final.pt")}
    assert _steps(os.path.join(checkpoints, "final.pt")) == {30}
    assert {name: _contents(checkpoints)[name] for name in ("agent_10.pt", "agent_20.pt")} == {
        name: before[name] for name in ("agent_10.pt", "agent_20.pt")
    }


def test_a_link_planted_as_the_lock_is_refused_and_nothing_outside_is_written(tmp_path, capsys):
    """A run folder from elsewhere with ``train.lock`` linked to a file outside it: ``--resume`` neither truncates nor
    writes that file (nor creates the target of a dangling link)."""
    run_dir = _train(tmp_path / "runs", "--timesteps", "20")
    lock = os.path.join(run_dir, "train.lock")
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    for plant, target in ((os.symlink, outside), (os.link, outside), (os.symlink, tmp_path / "created.txt")):
        os.remove(lock)
        plant(target, lock)
        assert cli.main(["train", "--resume", run_dir, "--timesteps", "30", "--no-progress"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and lock in err and "remove it" in err, err
        assert outside.read_text() == "precious\n" and not (tmp_path / "created.txt").exists()
    os.remove(lock)
    assert cli.main(["train", "--resume", run_dir, "--timesteps", "30", "--no-progress"]) == 0


def _cut_last_row(path) -> None:
    """Cut ``path`` a few characters into its last row (a copy or a disk that stopped mid-write)."""
    text = open(path, newline="").read()
    start = text.rindex("\n", 0, len(text) - 1) + 1
    with open(path, "w", newline="") as file:
        file.write(text[: start + 4])


def test_an_episodes_csv_cut_mid_row_resumes_with_one_warning(tmp_path, capsys):
    run_dir = _train(tmp_path, "--timesteps", "60", "agent.experiment.checkpoint_interval=20")  # episodes of 25 steps
    episodes = os.path.join(run_dir, "episodes.csv")
    rows = open(episodes).read().splitlines()
    assert len(rows) > 3
    _cut_last_row(episodes)
    capsys.readouterr()
    assert cli.main(["train", "--resume", run_dir, "--timesteps", "80", "--no-progress"]) == 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "warning" in err and episodes in err and "cut" in err, err
    assert open(episodes).read().splitlines()[: len(rows) - 1] == rows[:-1]  # the whole rows kept

    lines = open(episodes).read().splitlines()
    lines[2] = "x,y"  # a damaged row is left out with one line naming it, and the run goes on
    with open(episodes, "w") as file:
        file.write("\n".join(lines) + "\n")
    assert cli.main(["train", "--resume", run_dir, "--timesteps", "100", "--no-progress"]) == 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and episodes in err and "line 3" in err and "Traceback" not in err, err


STALE = time.time() - 3600


def _temporary(folder, name, *, stale=True) -> str:
    """A temporary file as a write that was killed leaves it, ``stale`` (an hour old) or just written."""
    path = os.path.join(folder, f".{name}.{os.urandom(4).hex()}.tmp")
    with open(path, "wb") as file:
        file.write(b"\0" * 1000)
    if stale:
        os.utime(path, (STALE, STALE))
    return path


def _while_writing(path, command) -> list[str]:
    """Run ``command`` while a write of ``path`` is under way in this process (its temporary file made to look an hour
    old, so only the write's lock tells it is live); return the leftover temporary files of ``path``'s name."""

    def write(file):
        file.write(b"being written")
        os.utime(file.fileno(), (STALE, STALE))
        command()

    write_atomic(path, write)  # fails if the command removed its temporary file
    assert open(path, "rb").read() == b"being written"
    folder, name = os.path.split(path)
    return [n for n in os.listdir(folder) if n.startswith(f".{name}.")]


def test_stale_temporary_files_are_removed_and_live_ones_kept(tmp_path):
    """``train --resume`` clears the temporary files killed writes left in its run folder and ``checkpoints/``, and
    ``export`` those of its ``--out``; a write another process has under way (holding its temporary file's lock), a
    fresh one and files of other names are left alone."""
    run_dir = _train(tmp_path / "runs", "--timesteps", "20")
    checkpoints = os.path.join(run_dir, "checkpoints")
    stale = [_temporary(checkpoints, "agent_78.pt"), _temporary(run_dir, "run.json")]
    kept = [_temporary(checkpoints, "agent_79.pt", stale=False), os.path.join(run_dir, ".notes.tmp")]
    open(kept[-1], "w").close()
    resume = ["train", "--resume", run_dir, "--timesteps", "30", "--no-progress"]
    assert _while_writing(os.path.join(run_dir, "notes.json"), lambda: cli.main(resume) == 0 or pytest.fail()) == []
    assert _run(run_dir)["step"] == 30
    assert [os.path.exists(p) for p in stale + kept] == [False, False, True, True]

    out = tmp_path / "exports"
    out.mkdir()
    target = str(out / "play.pt")
    stale, other = _temporary(out, "play.pt"), _temporary(out, "other.pt")
    export = ["export", run_dir, "--out", target]
    assert _while_writing(str(out / "play.pt"), lambda: cli.main(export) == 0 or pytest.fail()) == []
    assert not os.path.exists(stale) and os.path.exists(other)


def test_a_failed_plot_leaves_a_run_whose_resume_makes_it(tmp_path, capsys, monkeypatch):
    import matplotlib.figure

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as patch:
        patch.setattr(matplotlib.figure.Figure, "savefig", full_disk)
        assert cli.main(["train", *SPREAD, "--out", str(tmp_path), "--timesteps", "20"]) == 1
    (run_dir,) = [str(p) for p in tmp_path.iterdir()]
    plot = os.path.join(run_dir, "learning_curve.png")
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and plot in err and f"skrl-marl train --resume {run_dir}" in err, err
    assert not os.path.exists(plot)
    assert cli.main(["train", "--resume", run_dir]) == 0
    assert plot in capsys.readouterr().out and os.path.getsize(plot) > 0
    assert _run(run_dir)["status"] == "finished" and _steps(os.path.join(run_dir, "checkpoints", "final.pt")) == {20}
    assert cli.main(["train", "--resume", run_dir]) == 2  # nothing left to do
    assert "pass --timesteps N with N > 20" in capsys.readouterr().err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_tensorboard_on_a_full_disk_ends_the_run_with_one_line(tmp_path, capfd, monkeypatch):
    """TensorBoard's event file turning into ``/dev/full`` mid-run (every write to it fails with ENOSPC, as on a full
    disk): one line naming the run folder and the ways out, no traceback of TensorBoard's writer thread."""
    out = tmp_path / "runs"
    printed = []  # what Python would print as "Exception in thread ..." (pytest would turn it into a warning)
    monkeypatch.setattr(threading, "excepthook", lambda args: printed.append(args.exc_value))

    def fill_the_disk():
        try:
            _wait_for(lambda: os.path.isdir(out) and os.listdir(out), what="the run folder")
            (run_dir,) = [os.path.join(out, n) for n in os.listdir(out)]
            _wait_for(lambda: _checkpointed(run_dir, 10), what="a checkpoint")
            (events,) = [os.path.join(run_dir, n) for n in os.listdir(run_dir) if n.startswith("events.out")]
            os.symlink("/dev/full", events + ".full")
            os.replace(events + ".full", events)
        except BaseException:
            os.kill(os.getpid(), signal.SIGINT)  # the run must end
            raise

    watcher = threading.Thread(target=fill_the_disk, daemon=True)
    watcher.start()
    overrides = ["agent.experiment.write_interval=2", "agent.experiment.checkpoint_interval=10"]
    status = cli.main(["train", *SPREAD, "--out", str(out), "--timesteps", "100000", *overrides])
    watcher.join()
    (run_dir,) = [os.path.join(out, n) for n in os.listdir(out)]
    err = capfd.readouterr().err.strip()
    assert status == 1 and len(err.splitlines()) == 1 and printed == [], (err, printed)
    assert run_dir in err and "No space left on device" in err and "agent.experiment.write_interval=0" in err, err
    record = _run(run_dir)
    assert record["status"] == "running" and _steps(record["checkpoint"]) == {record["step"]}
