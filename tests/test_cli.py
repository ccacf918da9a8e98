"""The skrl-marl command: a short train run end to end, eval of its checkpoint, one-line errors."""

from __future__ import annotations

import copy
import csv
import json
import os
import re

import pytest
import torch
from helpers import one_thread  # noqa: F401  (autouse: one torch thread)

from skrl_marl_ext import cli
from skrl_marl_ext.cli import build


def _train(tmp_path, *extra):
    argv = ["train", "--timesteps", "120", "--num-envs", "4", "--out", str(tmp_path), "--no-progress", *extra]
    assert cli.main(argv) == 0
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    return run_dir


def test_train_writes_checkpoint_plot_and_episodes_then_eval_loads(tmp_path, capsys):
    pytest.importorskip("vmas")
    run_dir = _train(tmp_path)  # the defaults: MAPPO on vmas:balance
    out = capsys.readouterr().out
    assert "skrl-marl: trained mappo on vmas:balance for 480 frames" in out
    checkpoint = run_dir / "checkpoints" / "final.pt"
    plot = run_dir / "learning_curve.png"
    assert f"  run folder: {run_dir.name}\n  in it: checkpoints/final.pt, learning_curve.png, episodes.csv" in out
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 5000
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(run_dir))
    run = json.loads((run_dir / "run.json").read_text())
    assert (run["algo"], run["env"], run["num_envs"], run["config"]["agent"]["class"]) == (
        "mappo",
        "vmas:balance",
        4,
        "MAPPO",
    )
    with open(run_dir / "episodes.csv") as file:
        rows = list(csv.DictReader(file))
    # balance episodes last 100 steps (or end earlier when the package falls): every env finished at least one
    assert len(rows) >= 4 and all(int(r["step"]) <= 120 and int(r["frames"]) == 4 * int(r["step"]) for r in rows)
    assert all(r["agent_0"] == r["agent_2"] for r in rows)  # balance's reward is shared

    def evaluate():
        assert cli.main(["eval", "--checkpoint", str(checkpoint), "--episodes", "3"]) == 0
        return capsys.readouterr().out.strip().splitlines()

    lines = evaluate()
    assert lines[0].startswith("skrl-marl: 3 deterministic episodes of mappo on vmas:balance")
    table = {line.split(":")[0].strip(): line.split(":")[1].split("+-") for line in lines[1:]}
    assert list(table) == ["agent_0", "agent_1", "agent_2", "team"]
    team = float(table["team"][0])
    assert team == pytest.approx(sum(float(table[f"agent_{i}"][0]) for i in range(3)), abs=3e-3)
    assert evaluate() == lines  # deterministic actions, same seed: the same episodes
    # the run directory works as --checkpoint too
    assert cli.main(["eval", "--checkpoint", str(run_dir), "--episodes", "3"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[1:] == lines[1:]


def test_ippo_shared_policy_on_builtin_env(tmp_path, capsys):
    run_dir = _train(tmp_path, "--algo", "ippo", "--env", "builtin:spread", "--shared-policy")
    run = json.loads((run_dir / "run.json").read_text())
    assert run["config"]["models"]["share_across_agents"] is True
    modules = torch.load(run_dir / "checkpoints" / "final.pt", weights_only=False)
    # one shared policy: every agent's saved policy weights are identical
    first = modules["policy"]["agent_0"] if "policy" in modules else modules["agent_0"]["policy"]
    other = modules["policy"]["agent_2"] if "policy" in modules else modules["agent_2"]["policy"]
    assert all(torch.equal(first[k], other[k]) for k in first)


def test_maddpg_train_and_eval(tmp_path, capsys):
    from skrl_marl_ext.runner import load_algorithm

    try:
        load_algorithm("maddpg")
    except ValueError:
        pytest.skip("MADDPG is not in this installation")
    run_dir = _train(tmp_path, "--algo", "maddpg", "--env", "builtin:spread", "--env-arg", "continuous=false")
    run = json.loads((run_dir / "run.json").read_text())
    assert run["config"]["agent"]["class"] == "MADDPG" and run["env_kwargs"] == {"continuous": False}
    modules = torch.load(run_dir / "checkpoints" / "final.pt", weights_only=False)
    # the default config has TD3's twin critics (configs/maddpg.yaml, models: critic_2:)
    roles = {"policy", "target_policy", "critic", "target_critic", "critic_2", "target_critic_2"}
    assert set(modules["agent_1"]) >= roles
    capsys.readouterr()
    assert cli.main(["eval", "--checkpoint", str(run_dir), "--episodes", "4"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("skrl-marl: 4 deterministic episodes of maddpg on builtin:spread")
    assert [line.split(":")[0].strip() for line in lines[1:]] == ["agent_0", "agent_1", "agent_2", "team"]


def test_config_file_sets_algo_and_timesteps(tmp_path, capsys):
    config = os.path.join(os.path.dirname(__file__), os.pardir, "examples", "ippo.yaml")
    argv = ["train", "--config", config, "--env", "builtin:spread", "--num-envs", "4"]
    assert cli.main([*argv, "--out", str(tmp_path), "--no-progress", "--timesteps", "60"]) == 0
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    run = json.loads((run_dir / "run.json").read_text())
    assert (run["algo"], run["timesteps"], run["config"]["agent"]["rollouts"]) == ("ippo", 60, 50)
    assert cli.main([*argv, "--algo", "mappo"]) == 2  # --algo contradicts the config
    assert "agent.class IPPO" in capsys.readouterr().err


def test_missing_maddpg_is_one_line(monkeypatch, capsys):
    import sys

    import skrl_marl_ext

    monkeypatch.delattr(skrl_marl_ext, "MADDPG", raising=False)
    monkeypatch.setitem(sys.modules, "skrl_marl_ext.algorithms.maddpg", None)  # import fails
    assert cli.main(["train", "--algo", "maddpg"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "MADDPG is not available" in err


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["train", "--algo", "sac"], "--algo sac: unknown algorithm. Did you mean 'masac'? Choose one of mappo, ippo"),
        (["train", "--env", "gym:CartPole"], "Write vmas:<scenario>"),
        (["train", "--env", "builtin:nope"], "Builtin envs: spread"),
        (["train", "--env", "vmas:no_such_scenario"], "Valid scenarios: "),
        (["train", "--env", "pettingzoo:not_a_package.env"], "install it: pip install not_a_package"),
        (["train", "--env-arg", "nokeyvalue"], "write KEY=VALUE"),
        (["train", "--device", "gpu0"], "not a torch device"),
        (["train", "--config", "/no/such.yaml"], "no such file"),
        (["eval", "--checkpoint", "/no/such/run"], "/no/such/run does not exist"),
    ],
)
def test_bad_input_is_one_line(argv, expected, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and expected in err and "Traceback" not in err


def test_missing_extra_says_what_to_install(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vmas" else real(name, *a))
    assert cli.main(["train"]) == 2
    assert "pip install 'skrl-marl-ext[vmas]'" in capsys.readouterr().err


def test_mappo_on_env_without_state_points_to_ippo(tmp_path, capsys):
    # dying_env (in tests/) is a ParallelEnv without state()
    assert cli.main(["train", "--env", "pettingzoo:dying_env", "--out", str(tmp_path)]) == 2
    assert "use --algo ippo" in capsys.readouterr().err


@pytest.mark.parametrize(
    "command, defaults",
    [
        (
            "train",
            {"--env": "vmas:balance", "--num-envs": "128", "--timesteps": "4000", "--device": "cpu", "--seed": "0"},
        ),
        ("eval", {"--episodes": "10", "--seed": "12345", "--threads": "1"}),
    ],
)
def test_help_states_every_options_default(command, defaults, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([command, "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    # the help entry of each option: from its line to the next option's line, whitespace collapsed
    starts = [(m.group(1), m.start()) for m in re.finditer(r"^  (--[a-z-]+)", text, flags=re.MULTILINE)]
    entries = {
        name: " ".join(text[start : (starts[i + 1][1] if i + 1 < len(starts) else len(text))].split())
        for i, (name, start) in enumerate(starts)
    }
    subparser = cli.make_parser()._subparsers._group_actions[0].choices[command]
    options = [
        a.option_strings[-1] for a in subparser._actions if a.option_strings and a.option_strings[-1] != "--help"
    ]
    assert sorted(entries) == sorted(options)
    for option in options:
        assert "(default: " in entries[option] or "(required, no default)" in entries[option], entries[option]
    for option, value in defaults.items():
        assert f"(default: {value}" in entries[option] or f"else {value})" in entries[option], entries[option]


def _agent_of_run(run_dir) -> object:
    """The agent a run folder describes, built as ``eval`` builds it (the env and config its ``run.json`` recorded,
    through the public builders) and loaded with its final checkpoint."""
    run = json.loads((run_dir / "run.json").read_text())
    env = build.build_env(run["env"], num_envs=2, device=run["device"], seed=0, env_kwargs=run["env_kwargs"])
    cfg = copy.deepcopy(run["config"])
    cfg["agent"]["experiment"] = {"directory": str(run_dir), "write_interval": 0, "checkpoint_interval": 0}
    agent = build.build_runner(env, cfg).agent
    agent.load(str(run_dir / "checkpoints" / "final.pt"))
    return agent


def _leaves(value):
    """The scalars of a per-agent dict / pair, flattened."""
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def _linear_sizes(model):
    return [m.out_features for m in model.modules() if isinstance(m, torch.nn.Linear)]


def test_overrides_reach_the_agent_and_eval_rebuilds_it(tmp_path, capsys):
    overrides = [
        "agent.learning_rate=1e-3",  # YAML 1.1 reads 1e-3 as a string: the CLI takes it as the float it means
        "agent.mixed_precision=true",
        "agent.rollouts=30",
        "models.policy.hidden_sizes=[8,4]",
    ]
    run_dir = _train(tmp_path, "--env", "builtin:spread", "--timesteps", "60", *overrides)
    agent = _agent_of_run(run_dir)
    assert set(_leaves(agent.cfg.learning_rate)) == {1e-3}
    assert set(_leaves(agent.cfg.mixed_precision)) == {True}
    assert set(_leaves(agent.cfg.rollouts)) == {30}
    assert all(_linear_sizes(agent.models[uid]["policy"])[:2] == [8, 4] for uid in agent.possible_agents)
    assert _linear_sizes(agent.models["agent_0"]["value"])[:2] == [128, 128]  # the default config's value model

    run = json.loads((run_dir / "run.json").read_text())
    assert run["overrides"] == overrides
    assert run["config"]["agent"]["learning_rate"] == 1e-3 and run["config"]["agent"]["mixed_precision"] is True
    assert run["config"]["models"]["policy"]["hidden_sizes"] == [8, 4]

    capsys.readouterr()
    assert cli.main(["eval", "--checkpoint", str(run_dir), "--episodes", "2"]) == 0
    assert capsys.readouterr().out.startswith("skrl-marl: 2 deterministic episodes of mappo on builtin:spread")


@pytest.mark.parametrize(
    "override, expected",
    [
        ("agent.learning_rat=1e-3", "MAPPO: unknown config key 'learning_rat'. Did you mean 'learning_rate'?"),
        ("agent.experiment.write_intervall=5", "unknown config key 'write_intervall'. Did you mean 'write_interval'?"),
        ("agnet.learning_rate=1", "unknown config section 'agnet'. Did you mean 'agent'?"),
        ("agent.learning_rate", "not a config override; write SECTION.KEY=VALUE"),
        ("agnet.learning_rate:1", "Did you mean 'agent.learning_rate=1'?"),
        ("agent=1", "name a key inside agent"),
        ("agent.learning_rate.x=1", "in the config, not a section with keys"),
        ("agent.class=IPPO", "choose the algorithm with --algo"),
        ("models.polcy.hidden_sizes=[8]", "the config has no model 'polcy'. Did you mean 'policy'?"),
        (
            "models.policy.hidden_sizez=[8]",
            "config: models.policy.hidden_sizez: GaussianMLP takes no argument 'hidden_sizez'. "
            "Did you mean 'hidden_sizes'?",
        ),
        ("memory.memory_sise=3", "memory.memory_sise: RandomMemory takes no argument 'memory_sise'."),
        ("models.policy.hidden_sizes=[8", "the value is not valid YAML"),
    ],
)
def test_bad_override_is_one_line_with_the_fix(override, expected, tmp_path, capsys):
    argv = ["train", "--env", "builtin:spread", "--num-envs", "2", "--timesteps", "2", "--out", str(tmp_path)]
    assert cli.main([*argv, "--no-progress", override]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("skrl-marl train: error: ") and "Traceback" not in err
    assert expected in err, err
    assert not list(tmp_path.iterdir())  # nothing written


def test_the_command_imports_skrl_only_after_its_own_setup():
    """``python -m skrl_marl_ext`` and ``skrl-marl`` import the package and cli first: under torchrun the process group
    must exist before skrl's import-time setup, so neither may import skrl."""
    import subprocess
    import sys

    code = "import sys, skrl_marl_ext, skrl_marl_ext.cli; print(sorted(m for m in sys.modules if m.split('.')[0] == 'skrl'))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_train_rnn_builds_recurrent_models_and_eval_reloads_them(tmp_path, capsys):
    run_dir = _train(tmp_path, "--env", "builtin:memory", "--rnn", "lstm", "--sequence-length", "5")
    run = json.loads((run_dir / "run.json").read_text())
    models = run["config"]["models"]
    assert (models["policy"]["class"], models["value"]["class"]) == ("PolicyRNN", "ValueRNN")
    assert models["policy"]["cell"] == "lstm" and models["policy"]["sequence_length"] == 5
    capsys.readouterr()
    assert cli.main(["eval", "--checkpoint", str(run_dir), "--episodes", "4"]) == 0
    assert capsys.readouterr().out.startswith("skrl-marl: 4 deterministic episodes of mappo on builtin:memory")
    # a sequence length that does not divide the rollout, and MADDPG, are refused with the fix named
    argv = ["train", "--env", "builtin:memory", "--rnn", "gru", "--sequence-length", "7", "--out", str(tmp_path)]
    assert cli.main(argv) == 2
    assert "must divide agent.rollouts" in capsys.readouterr().err
    assert cli.main([*argv[:-4], "--algo", "maddpg", "--out", str(tmp_path)]) == 2
    assert "--rnn works with mappo, ippo and happo" in capsys.readouterr().err


def test_resume_continues_a_run_from_its_newest_checkpoint(tmp_path, capsys):
    argv = ["--env", "builtin:spread", "--env-arg", "episode_length=10", "--timesteps", "60"]
    run_dir = _train(tmp_path, *argv, "agent.experiment.checkpoint_interval=20")
    checkpoints = run_dir / "checkpoints"
    with open(run_dir / "episodes.csv") as file:
        first = list(csv.DictReader(file))
    # the run stopped after its checkpoint of step 40
    (checkpoints / "agent_60.pt").unlink()
    (checkpoints / "final.pt").unlink()
    capsys.readouterr()

    assert cli.main(["train", "--resume", str(run_dir), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "for 80 frames in " in out and "\n  resumed from step 40 of 60\n" in out  # the remaining 20 steps of 4 envs
    assert sorted(os.listdir(checkpoints)) == ["agent_20.pt", "agent_40.pt", "agent_60.pt", "final.pt"]
    for name in ("agent_60.pt", "final.pt"):
        progress = {m["progress"]["timestep"] for m in torch.load(checkpoints / name, weights_only=True).values()}
        assert progress == {60}, name
    with open(run_dir / "episodes.csv") as file:
        rows = list(csv.DictReader(file))
    # the episodes up to the checkpoint are kept; the resumed part's (new episodes: the envs reset) follow them
    assert rows[: len([r for r in first if int(r["step"]) <= 40])] == [r for r in first if int(r["step"]) <= 40]
    later = [int(r["step"]) for r in rows if int(r["step"]) > 40]
    assert sorted(later) == [50] * 4 + [60] * 4  # 10-step episodes of 4 envs from step 40 on
    run = json.loads((run_dir / "run.json").read_text())
    assert run["timesteps"] == 60 and [r["from_step"] for r in run["resumed"]] == [40]

    # options that disagree with the run's own are refused by name; a finished run has nothing to resume
    assert cli.main(["train", "--resume", str(run_dir), "--algo", "ippo"]) == 2
    assert "--algo 'ippo' disagrees with the run being resumed (the run's: 'mappo')" in capsys.readouterr().err
    assert cli.main(["train", "--resume", str(run_dir), "agent.learning_rate=1e-3"]) == 2
    assert "overrides" in capsys.readouterr().err
    assert cli.main(["train", "--resume", str(run_dir)]) == 2
    assert "the run has completed its 60 steps" in capsys.readouterr().err
