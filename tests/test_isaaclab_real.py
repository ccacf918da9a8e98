"""Isaac Lab 3.0's own multi-agent env, ``Isaac-Pendulum-MARL-Direct``, trained by this package kit-less on the CPU.

Isaac Lab 3.0 lives in its own environment beside the package (``scripts/setup_isaaclab.sh``: ``.isaaclab-venv/``, the
stand-in robot under ``.isaaclab-assets/``, Warp's kernels in ``.isaaclab-cache/warp``), so these tests run
``tests/isaaclab_real_driver.py`` and Isaac Lab's ``isaaclab`` command with that interpreter and check what they did.
They skip where it is not installed; with ``SKRL_MARL_EXT_REQUIRE_ISAACLAB=1`` (CI) they fail instead.

- Our Runner, on the env wrapped by skrl's Isaac Lab wrapper, builds MAPPO, IPPO and HAPPO from the task's YAML files
  in the installed ``isaaclab_tasks`` and trains each two rollouts; skrl's own MAPPO/IPPO (what ``isaaclab play``
  builds) load the checkpoint and act with our agent's mean actions; a run resumed from it keeps its timestep.
- ``skrl-marl isaaclab train`` (Isaac Lab's own train backend with our Runner) trains each of MAPPO, IPPO, HAPPO,
  MADDPG, MASAC and HASAC from the config ``--algorithm`` finds (Isaac Lab's files for MAPPO/IPPO, the package's for
  the others),
  ``--checkpoint`` resumes each from its timestep, and ``skrl-marl isaaclab play`` plays each checkpoint until Ctrl+C;
  Isaac Lab's own ``isaaclab play``, untouched, plays our MAPPO and IPPO checkpoints; the installed Isaac Lab files
  are the same after all this as before.

The first run after an install compiles Warp's kernels (a minute or two; the setup script does it once).
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import yaml

REPO = Path(__file__).resolve().parent.parent
VENV = REPO / ".isaaclab-venv"
PYTHON = VENV / "bin" / "python"
DRIVER = Path(__file__).resolve().parent / "isaaclab_real_driver.py"
ENV = {
    **os.environ,
    "ISAACSIM_ASSET_ROOT": str(REPO / ".isaaclab-assets"),
    "WARP_CACHE_PATH": str(REPO / ".isaaclab-cache" / "warp"),
    "OMP_NUM_THREADS": "1",  # small models: a second torch thread only waits for a core other tests hold
    "PYTHONUNBUFFERED": "1",  # a line printed to a pipe arrives when printed, not when a buffer fills
}
TASK = "Isaac-Pendulum-MARL-Direct"
ROLLOUTS = 16  # the shipped YAML files' agent.rollouts
TIMEOUT = 900  # s, per command: the first run compiles Warp's kernels
CTRL_C_PRESSES, CTRL_C_WAIT = 3, 60  # Ctrl+C pressed up to 3 times, 60 s apart (it stops in seconds)
TASK_ARGS = ["--task", TASK, "--num_envs", "8", "--device", "cpu"]
ALGORITHMS = ("MAPPO", "IPPO", "HAPPO", "MADDPG", "MASAC", "HASAC")
CHAINS_AT_ONCE = 2  # algorithms whose train -> resume -> play run at the same time (Isaac Lab's start-up is the cost)
LEARNS_AT_ONCE = {  # the off-policy agents learn within the 2 rollouts
    name: ["agent.agent.learning_starts=8", "agent.agent.batch_size=64"] for name in ("MADDPG", "MASAC", "HASAC")
}
RUN_OVERRIDES = [  # Hydra overrides of the agent's YAML: a checkpoint per rollout, no TensorBoard, no progress bar
    f"agent.agent.experiment.checkpoint_interval={ROLLOUTS}",
    "agent.agent.experiment.write_interval=0",
    "agent.trainer.disable_progressbar=true",
]

pytestmark = pytest.mark.slow


def _not_installed() -> str | None:
    """Why Isaac Lab cannot run here, or None."""
    if not PYTHON.is_file():
        return f"Isaac Lab 3.0 is not installed ({PYTHON} is missing): run scripts/setup_isaaclab.sh"
    if not os.path.isdir(ENV["ISAACSIM_ASSET_ROOT"]):
        return f"the stand-in assets are missing ({ENV['ISAACSIM_ASSET_ROOT']}): run scripts/setup_isaaclab.sh"
    probe = subprocess.run(
        [str(PYTHON), "-c", "import isaaclab_rl, isaaclab_tasks, skrl_marl_ext"], capture_output=True, text=True
    )
    if probe.returncode:
        last = (probe.stderr.strip().splitlines() or ["no message"])[-1]
        return f"{PYTHON} cannot import Isaac Lab and this package ({last}): run scripts/setup_isaaclab.sh"
    return None


@pytest.fixture(scope="module")
def isaaclab():
    reason = _not_installed()
    if reason and os.environ.get("SKRL_MARL_EXT_REQUIRE_ISAACLAB") == "1":
        pytest.fail(reason)
    if reason:
        pytest.skip(reason)


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [str(PYTHON), str(DRIVER), *args], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 0, f"{args[:2]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _progress(path: Path) -> set[int]:
    """The steps completed that the checkpoint's agents hold (our agents' module ``progress``; skrl's have none)."""
    modules = torch.load(path, weights_only=True)
    return {agent["progress"]["timestep"] for agent in modules.values()}


def _learned(first: Path, second: Path) -> bool:
    """Whether every agent's policy differs between two checkpoints of a run (it was trained in between)."""
    before, after = torch.load(first, weights_only=True), torch.load(second, weights_only=True)
    return all(
        any(not torch.equal(after[uid]["policy"][name], tensor) for name, tensor in before[uid]["policy"].items())
        for uid in before
    )


# ----------------------------------------------------------------------------- our Runner on the wrapped env


@pytest.fixture(scope="module")
def report(isaaclab, tmp_path_factory):
    out = tmp_path_factory.mktemp("isaaclab_runner") / "report.json"
    _run(["runner", str(out), "--algos", "mappo", "ippo", "happo"], cwd=out.parent)
    return json.loads(out.read_text())


def test_runner_builds_our_agents_from_the_installed_yaml_files(report):
    assert report["wrapper"] == "IsaacLabMultiAgentWrapper"  # skrl's wrap_env(env, "isaaclab")
    for algo, run in report["algorithms"].items():
        assert run["agent"] == algo.upper()
        source = {"ippo": "skrl_marl_ippo_cfg.yaml"}.get(algo, "skrl_marl_mappo_cfg.yaml")
        assert Path(run["yaml"]).is_relative_to(VENV)  # read from the installed package, not a copy
        assert run["yaml"].endswith(f"/site-packages/isaaclab_tasks/core/pendulum/agents/{source}")
        assert run["rollouts"] == ROLLOUTS


@pytest.mark.parametrize("algo", ["mappo", "ippo", "happo"])
def test_trains_on_the_real_env_and_checkpoints_every_rollout(report, algo):
    run = report["algorithms"][algo]
    assert run["trained"]  # every agent's parameters moved
    assert run["checkpoints"] == [f"agent_{ROLLOUTS}.pt", f"agent_{2 * ROLLOUTS}.pt"]
    assert run["progress"] == [2 * ROLLOUTS]


@pytest.mark.parametrize("algo", ["mappo", "ippo", "happo"])
def test_checkpoint_plays_in_skrls_own_agent_with_our_mean_actions(report, algo):
    run = report["algorithms"][algo]
    skrl_class = {"ippo": "skrl.multi_agents.torch.ippo.ippo.IPPO"}.get(
        algo, "skrl.multi_agents.torch.mappo.mappo.MAPPO"
    )
    assert run["skrl_agent"] == skrl_class
    assert run["mean_action_scale"] > 0
    assert run["mean_action_difference"] == 0.0


@pytest.mark.parametrize("algo", ["mappo", "ippo", "happo"])
def test_a_run_resumed_from_the_checkpoint_keeps_its_timestep(report, algo):
    run = report["algorithms"][algo]
    assert run["resumed_trained"]
    assert run["resumed_checkpoints"] == [f"agent_{3 * ROLLOUTS}.pt"]  # one rollout more, counted from the checkpoint
    assert run["resumed_progress"] == [3 * ROLLOUTS]


# ----------------------------------------------------------------------------- skrl-marl isaaclab train / play


def _command(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``skrl-marl isaaclab ARGS`` as a user types it, with the venv's console script."""
    command = [str(VENV / "bin" / "skrl-marl"), "isaaclab", *args]
    return subprocess.run(command, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=TIMEOUT)


def _raised(text: str) -> list[str]:
    """The exception of each traceback in ``text``: the first unindented line after its "Traceback" line."""
    names = []
    for block in text.split("Traceback (most recent call last):")[1:]:
        line = next((line for line in block.splitlines()[1:] if line and not line[0].isspace()), "")
        names.append(line.split(":")[0])
    return names


def _play(command: list[str], cwd: Path) -> dict:
    """``command`` (a play command) run as a user runs it, stopped with Ctrl+C once the policy is playing: whether it
    played, its exit status, the exceptions its output shows and the output's end."""
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # Ctrl+C reaches it however the suite was started (a shell's background job ignores SIGINT, and so would it)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines: queue.Queue[str] = queue.Queue()  # read on a thread: waiting for the line has a deadline
    reader = threading.Thread(target=lambda: [lines.put(line) for line in process.stdout], daemon=True)
    reader.start()
    output, playing, deadline = [], False, time.monotonic() + TIMEOUT
    interrupts = 0
    try:
        while time.monotonic() < deadline and not playing:
            try:
                output.append(lines.get(timeout=1))
            except queue.Empty:
                if process.poll() is not None:
                    break
                continue
            if "Policy playback is running" in output[-1]:
                time.sleep(2)  # hundreds of steps
                playing = process.poll() is None
        # Ctrl+C, and again as a user would if playback goes on: a KeyboardInterrupt that lands where Python or a
        # library drops exceptions (a __del__, a callback, a bare except) is lost there
        while process.poll() is None and interrupts < CTRL_C_PRESSES:
            process.send_signal(signal.SIGINT)
            interrupts += 1
            try:
                process.wait(timeout=CTRL_C_WAIT)
            except subprocess.TimeoutExpired:
                pass
        reader.join(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    while not lines.empty():
        output.append(lines.get())
    text = "".join(output)
    errors = [e for e in _raised(text) if e != "KeyboardInterrupt"]  # a lost Ctrl+C's is no error
    return {"playing": playing, "status": process.returncode, "errors": errors, "output": text[-3000:]}


def _chain(algorithm: str, cwd: Path) -> dict:
    """``skrl-marl isaaclab train --algorithm ALGORITHM`` for 2 iterations, ``train --checkpoint`` for 1 more from
    its last checkpoint, and ``play`` of the resumed run's checkpoint: the run folders and what each command did."""
    args = [*TASK_ARGS, "--algorithm", algorithm, *RUN_OVERRIDES, *LEARNS_AT_ONCE.get(algorithm, [])]
    runs = cwd / "logs" / "skrl" / "pendulum_marl_direct"
    result = {
        "trained": runs / f"first_{algorithm.lower()}_torch",
        "resumed": runs / f"resumed_{algorithm.lower()}_torch",
    }
    result["train"] = _command(["train", *args, "--max_iterations", "2", "--run_timestamp", "first"], cwd)
    if result["train"].returncode:
        return result
    checkpoint = result["trained"] / "checkpoints" / f"agent_{2 * ROLLOUTS}.pt"
    resume = ["train", *args, "--max_iterations", "1", "--run_timestamp", "resumed", "--checkpoint", str(checkpoint)]
    result["resume"] = _command(resume, cwd)
    if result["resume"].returncode:
        return result
    played = result["resumed"] / "checkpoints" / f"agent_{3 * ROLLOUTS}.pt"
    command = [str(VENV / "bin" / "skrl-marl"), "isaaclab", "play", *TASK_ARGS, "--algorithm", algorithm]
    result["play"] = _play([*command, "--checkpoint", str(played)], cwd)
    return result


INSTALLED = ("entrypoints/backends/train_skrl.py", "entrypoints/backends/play_skrl.py", "entrypoints/backends/cli_args_skrl.py", "skrl.py")  # fmt: skip
"""Isaac Lab's files (under ``isaaclab_rl``) whose names the command replaces in its process."""


def _installed_files() -> dict[str, str]:
    (site,) = VENV.glob("lib/python3*/site-packages/isaaclab_rl")
    return {name: hashlib.sha256((site / name).read_bytes()).hexdigest() for name in INSTALLED}


@pytest.fixture(scope="module")
def chains(isaaclab, tmp_path_factory):
    """Every algorithm's train -> resume -> play through ``skrl-marl isaaclab``, then ``isaaclab play`` (Isaac Lab's,
    untouched) of our MAPPO and IPPO checkpoints, and the installed Isaac Lab files before and after."""
    before = _installed_files()
    folders = {algorithm: tmp_path_factory.mktemp(f"isaaclab_{algorithm.lower()}") for algorithm in ALGORITHMS}
    with ThreadPoolExecutor(max_workers=CHAINS_AT_ONCE) as pool:
        results = dict(zip(ALGORITHMS, pool.map(_chain, ALGORITHMS, folders.values()), strict=True))
        isaaclab_play = {}
        for algorithm in ("MAPPO", "IPPO"):
            result = results[algorithm]
            if "play" in result:
                checkpoint = result["trained"] / "checkpoints" / f"agent_{2 * ROLLOUTS}.pt"
                command = [str(VENV / "bin" / "isaaclab"), "play", "--rl_library", "skrl", *TASK_ARGS]
                command += ["--algorithm", algorithm, "--checkpoint", str(checkpoint)]
                isaaclab_play[algorithm] = pool.submit(_play, command, folders[algorithm])
        for algorithm, future in isaaclab_play.items():
            results[algorithm]["isaaclab play"] = future.result()
    return {"algorithms": results, "installed before": before, "installed after": _installed_files()}


def _ran(result: dict, step: str) -> None:
    """Assert that ``step`` of a chain ran and succeeded (with its output when it did not)."""
    done = result.get(step)
    assert done is not None, f"{step} did not run: an earlier step failed"
    assert done.returncode == 0, f"{step} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_command_trains_every_algorithm_from_the_config_it_finds(chains, algorithm):
    result = chains["algorithms"][algorithm]
    _ran(result, "train")
    checkpoints = result["trained"] / "checkpoints"
    assert sorted(os.listdir(checkpoints)) == [f"agent_{ROLLOUTS}.pt", f"agent_{2 * ROLLOUTS}.pt"]
    assert _progress(checkpoints / f"agent_{2 * ROLLOUTS}.pt") == {2 * ROLLOUTS}  # our agent wrote it
    assert _learned(checkpoints / f"agent_{ROLLOUTS}.pt", checkpoints / f"agent_{2 * ROLLOUTS}.pt")
    config = yaml.safe_load((result["trained"] / "params" / "agent.yaml").read_text())
    assert config["agent"]["class"] == algorithm  # Isaac Lab's dump of the config it resolved


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_command_resumes_every_algorithm_from_its_checkpoints_timestep(chains, algorithm):
    result = chains["algorithms"][algorithm]
    _ran(result, "resume")
    resumed = result["resumed"] / "checkpoints"
    # the rollout after the checkpoint's; train_skrl.py's final write_checkpoint, in its trainer's count, is named by
    # the run's step too
    assert sorted(os.listdir(resumed)) == [f"agent_{3 * ROLLOUTS}.pt"]
    assert _progress(resumed / f"agent_{3 * ROLLOUTS}.pt") == {3 * ROLLOUTS}


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_the_command_plays_every_algorithms_checkpoint(chains, algorithm):
    played = chains["algorithms"][algorithm].get("play")
    assert played is not None, "play did not run: an earlier step failed"
    assert played["playing"], played["output"]
    assert played["status"] == 0, played["output"]
    assert not played["errors"], played["output"]


@pytest.mark.parametrize("algorithm", ["MAPPO", "IPPO"])
def test_isaac_labs_own_play_plays_our_checkpoint_untouched(chains, algorithm):
    played = chains["algorithms"][algorithm].get("isaaclab play")
    assert played is not None, "isaaclab play did not run: an earlier step failed"
    assert played["playing"], played["output"]
    assert played["status"] == 0, played["output"]
    assert not played["errors"], played["output"]


def test_isaac_lab_is_left_as_installed(chains):
    assert chains["installed after"] == chains["installed before"]
