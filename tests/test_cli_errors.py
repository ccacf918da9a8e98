"""The command line's front door: every mistake a user types ends with one line naming the input and the fix (exit
status 2): a key written in the wrong section names its section, an unknown name gets the closest known one, an
option is taken only by its whole name, a YAML alias bomb or a file that is not UTF-8 is refused at once; and the
summary after training fits an 80-column terminal."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import pytest
import yaml
from helpers import one_thread  # noqa: F401  (autouse: one torch thread)

from skrl_marl_ext import cli

ROOT = os.path.join(os.path.dirname(__file__), os.pardir)
DEFAULTS = os.path.join(ROOT, "skrl_marl_ext", "configs", "mappo.yaml")
FAST = ["--env", "builtin:spread", "--num-envs", "2", "--timesteps", "4", "--no-progress"]


def _train(tmp_path, *argv) -> int:
    return cli.main(["train", *FAST, "--out", str(tmp_path / "runs"), *argv])


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def _config(tmp_path, change) -> str:
    """The package's MAPPO config with ``change(cfg)`` applied, written as a YAML file; returns its path."""
    with open(DEFAULTS) as file:
        cfg = yaml.safe_load(file)
    change(cfg)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


# ---------------------------------------------------------------------------------------------------- wrong section


@pytest.mark.parametrize(
    "section, key, value, expected",
    [
        ("trainer", "learning_rate", 1e-3, "trainer.learning_rate: 'learning_rate' is an agent key: write it as "),
        ("models", "rollouts", 64, "models.rollouts: 'rollouts' is an agent key: write it as agent.rollouts"),
        ("memory", "rollouts", 64, "memory.rollouts: 'rollouts' is an agent key: write it as agent.rollouts"),
        ("agent", "timesteps", 8, "agent.timesteps: 'timesteps' is a trainer argument: write it as trainer.timesteps"),
        ("agent", "write_interval", 5, "is a key of agent.experiment: write it as agent.experiment.write_interval"),
        ("agent", "hidden_sizes", [8], "is a model argument: write it as models.policy.hidden_sizes"),
        ("models", "hidden_sizes", [8], "models.hidden_sizes: 'hidden_sizes' is a model argument: write it as models."),
        ("models.policy", "rollouts", 8, "models.policy.rollouts: 'rollouts' is an agent key: write it as agent."),
        (
            None,
            "learning_rate",
            1e-3,
            "learning_rate: 'learning_rate' is an agent key: write it as agent.learning_rate",
        ),
    ],
)
def test_a_key_in_the_wrong_section_names_the_section_it_belongs_to(section, key, value, expected, tmp_path, capsys):
    def change(cfg):
        node = cfg
        for part in section.split(".") if section else []:
            node = node.setdefault(part, {})
        node[key] = value

    assert _train(tmp_path, "--config", _config(tmp_path, change)) == 2
    assert expected in _one_line_error(capsys)


def test_an_override_in_the_wrong_section_names_the_section_it_belongs_to(tmp_path, capsys):
    assert _train(tmp_path, "trainer.learning_rate=1e-3") == 2
    assert "trainer.learning_rate: 'learning_rate' is an agent key: write it as agent.learning_rate" in (
        _one_line_error(capsys)
    )
    # a key no other section takes keeps the closest of its own section's
    assert _train(tmp_path, "trainer.timestep=8") == 2
    assert "trainer.timestep: SequentialTrainer takes no argument 'timestep'. Did you mean 'timesteps'?" in (
        _one_line_error(capsys)
    )


# ---------------------------------------------------------------------------------------------------- unknown names


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--env", "vmas:balence"], "unknown VMAS scenario 'balence'. Did you mean 'balance'?"),
        (["--env", "vmaz:balance"], "bad env 'vmaz:balance'. Did you mean 'vmas:balance'?"),
        (["--env", "builtin:spraed"], "unknown builtin env 'spraed'. Did you mean 'spread'?"),
        (["--env", "mamujoco:HalfCheeta-2x3"], "unknown MaMuJoCo scenario 'HalfCheeta'. Did you mean 'HalfCheetah'?"),
        (["--env-arg", "num_agent=3"], "takes no argument 'num_agent'. Did you mean 'num_agents'?"),
        (["--algo", "mapo"], "--algo mapo: unknown algorithm. Did you mean 'mappo'?"),
        (["--config", "happo_mamujcoo"], "nor a config of the package. Did you mean 'happo_mamujoco'?"),
        (["--device", "cpuu"], "--device cpuu: not a torch device. Did you mean 'cpu'?"),
    ],
)
def test_an_unknown_name_gets_the_closest(argv, expected, tmp_path, capsys):
    if "vmas:balence" in argv:
        pytest.importorskip("vmas")
    assert _train(tmp_path, *argv) == 2
    assert expected in _one_line_error(capsys)


@pytest.mark.parametrize(
    "argv, usage, expected",
    [
        (
            ["train", "--timestpes", "100"],
            "skrl-marl train",
            "unrecognized option '--timestpes'. Did you mean '--timesteps'?",
        ),
        (
            ["train", "--num-env", "16"],
            "skrl-marl train",
            "unrecognized option '--num-env'. Did you mean '--num-envs'?",
        ),
        (["train", "--sed=3"], "skrl-marl train", "unrecognized option '--sed'. Did you mean '--seed'?"),
        (["trian"], "skrl-marl", "invalid choice 'trian'. Did you mean 'train'?"),
        (["train", "--rnn", "gruu"], "skrl-marl train", "invalid choice 'gruu'. Did you mean 'gru'?"),
        (
            ["eval", "--checkpiont", "run"],
            "skrl-marl eval",
            "unrecognized option '--checkpiont'. Did you mean '--checkpoint'?",
        ),
        (["export", "run", "--ou", "x.pt"], "skrl-marl export", "unrecognized option '--ou'. Did you mean '--out'?"),
    ],
)
def test_an_option_is_taken_by_its_whole_name_and_a_typo_gets_the_closest(argv, usage, expected, capsys):
    """argparse would take ``--num-env`` (or ``--ou``) for the option it begins, and report a typo with the top-level
    usage and no suggestion."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[0].startswith(f"usage: {usage} "), lines
    assert lines[-1].startswith(f"{usage}: error: ") and expected in lines[-1], lines


# ---------------------------------------------------------------------------------------------------- bad files


BOMB = "[&a [1,1,1,1,1,1,1,1,1]" + "".join(
    f", &{b} [{','.join(['*' + a] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi", strict=True)
)
BOMB += "]"
"""Nine levels of nine YAML aliases: under 1 KB of text, 387 million values once expanded."""


PROBE = """
import contextlib, io, json, resource, sys, time
from skrl_marl_ext import cli
base, argv = json.loads(sys.argv[1])
with contextlib.redirect_stderr(io.StringIO()):
    cli.main([*base, "--algo", "mapo"])  # refused after the same imports: what follows measures the refusal alone
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
status = cli.main([*base, *argv])
seconds = time.perf_counter() - start
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
print(json.dumps({"status": status, "seconds": seconds, "grown": grown}))
"""
"""``skrl-marl train`` in a process of its own, which prints the exit status of ``argv``, the seconds it took and how
far it raised the process's peak memory (bytes)."""


def _bounded(limit_bytes: int):
    """A ``preexec_fn`` that caps a process's address space, so a bomb that is not refused fails fast, alone."""

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    return cap


@pytest.mark.parametrize("entry", ["--config", "override", "--env-arg"])
def test_a_yaml_alias_bomb_is_refused_at_once(entry, tmp_path):
    assert len(BOMB) < 1000
    if entry == "--config":
        path = tmp_path / "bomb.yaml"
        path.write_text(f"agent:\n  class: MAPPO\n  rollouts: {BOMB}\n")
        argv, named = ["--config", str(path)], f"--config {path}: agent.rollouts"
    elif entry == "override":
        argv, named = [f"agent.rollouts={BOMB}"], "'agent.rollouts=[&a [1,"
    else:
        argv, named = ["--env-arg", f"x={BOMB}"], "--env-arg 'x=[&a [1,"
    base = ["train", *FAST, "--out", str(tmp_path / "runs")]
    result = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps([base, argv])],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_bounded(3 * 2**30),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    err = result.stderr.strip()
    assert measured["status"] == 2 and len(err.splitlines()) == 1, err
    assert named in err and "holds more than 100000 values once its YAML aliases (*name) are expanded" in err, err
    assert len(err) < 500, err  # the value is not shown whole
    assert measured["seconds"] < 5 and measured["grown"] < 100e6, measured


def test_a_value_that_holds_itself_is_refused(tmp_path, capsys):
    assert _train(tmp_path, "agent.rollouts=&x [1, *x]") == 2  # an alias inside its own anchor
    assert "agent.rollouts[1]: holds itself (a YAML alias *name inside its own &name anchor)" in _one_line_error(capsys)


def test_a_config_that_is_not_utf8_is_named(tmp_path, capsys):
    path = tmp_path / "latin1.yaml"
    text = "agent:\n  class: MAPPO  # Chloé's\n"
    path.write_bytes(text.encode("latin-1"))
    assert _train(tmp_path, "--config", str(path)) == 2
    err = _one_line_error(capsys)
    assert f"--config {path}: not UTF-8 text (byte 0xe9 at offset {text.index('é')}); save it as UTF-8" in err, err
    path.write_bytes(b"agent:\n  class: MAPPO\x00\n")  # a binary file
    assert _train(tmp_path, "--config", str(path)) == 2
    assert f"--config {path}: the control character U+0000" in _one_line_error(capsys)


# ---------------------------------------------------------------------------------------------------- the summary


def test_the_summary_fits_80_columns_with_paths_relative_to_the_working_directory(tmp_path, capsys):
    assert os.getcwd() == str(tmp_path)  # conftest: every test runs in its tmp_path
    argv = ["train", "--env", "builtin:spread", "--env-arg", "episode_length=5", "--num-envs", "2"]
    assert cli.main([*argv, "--timesteps", "20", "--no-progress"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("skrl-marl: trained mappo on builtin:spread"))
    summary = lines[start:]
    assert len(summary) <= 6 and all(len(line) <= 80 for line in summary), summary
    (run_dir,) = os.listdir("runs")
    assert f"  run folder: runs/{run_dir}" in summary, summary
    assert "  in it: checkpoints/final.pt, learning_curve.png, episodes.csv, run.json" in summary, summary
    assert f"  tensorboard --logdir runs/{run_dir}" in summary, summary
    assert all(os.path.isfile(os.path.join("runs", run_dir, name)) for name in ("checkpoints/final.pt", "run.json"))
    assert str(tmp_path) not in "\n".join(summary)

    elsewhere = tmp_path.parent / f"{tmp_path.name}-out"  # outside the working directory: the path stays absolute
    assert cli.main([*argv, "--timesteps", "5", "--no-progress", "--out", str(elsewhere)]) == 0
    assert f"  run folder: {elsewhere / os.listdir(elsewhere)[0]}" in capsys.readouterr().out
