"""Checkpoints are unpickled with ``weights_only=True``: a crafted file is refused before any of it runs, and
everything ``save()`` writes (models, Adam, LR schedulers, preprocessors, ValueNorm, GradScaler) still loads."""

from __future__ import annotations

import pytest
import torch
from helpers import drive, make_agent, make_maddpg, one_thread, params, spread  # noqa: F401  (one_thread: autouse)
from skrl.resources.preprocessors.torch import RunningStandardScaler
from skrl.resources.schedulers.torch import KLAdaptiveLR

from skrl_marl_ext import cli
from skrl_marl_ext.preprocessors import ValueNorm

REFUSED = "holds objects other than tensors and state dicts and was refused without running them"


class _Payload:
    """Unpickling it runs code: it creates ``marker`` (what an attacker's ``__reduce__`` would do, harmlessly)."""

    def __init__(self, marker) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').close()",)


def _write_payload(path, marker, agents) -> None:
    """A checkpoint shaped like ``save()``'s, with the payload where the policy's state dict belongs."""
    torch.save({uid: {"policy": _Payload(marker)} for uid in agents}, str(path))


def test_payload_runs_when_unpickled_unsafely(tmp_path):
    # the control: the payload is live, so the refusals below are what keep the marker away
    marker = tmp_path / "control_marker"
    _write_payload(tmp_path / "control.pt", marker, ["agent_0"])
    torch.load(tmp_path / "control.pt", weights_only=False)
    assert marker.exists()


@pytest.mark.parametrize("algo", ["mappo", "maddpg"])
def test_load_refuses_a_crafted_checkpoint_without_running_it(algo, tmp_path):
    env = spread(num_envs=4, num_agents=2)
    agent = make_agent(env) if algo == "mappo" else make_maddpg(env)
    marker, path = tmp_path / "marker", tmp_path / "crafted.pt"
    _write_payload(path, marker, env.possible_agents)
    with pytest.raises(ValueError) as error:
        agent.load(str(path))
    message = str(error.value)
    assert "\n" not in message
    assert str(path) in message and REFUSED in message
    assert "GLOBAL exec" in message  # torch's reason, in one line
    assert "only checkpoints written by save() and from trusted sources load" in message
    assert not marker.exists()


def test_eval_refuses_a_crafted_checkpoint_without_running_it(tmp_path, capsys):
    out = tmp_path / "runs"
    argv = ["train", "--env", "builtin:spread", "--num-envs", "4", "--timesteps", "40", "--out", str(out)]
    assert cli.main([*argv, "--no-progress"]) == 0
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    checkpoint = run_dir / "checkpoints" / "final.pt"
    assert cli.main(["eval", "--checkpoint", str(checkpoint), "--episodes", "2"]) == 0  # the real one loads
    capsys.readouterr()

    marker = tmp_path / "marker"
    _write_payload(checkpoint, marker, [f"agent_{i}" for i in range(3)])
    assert cli.main(["eval", "--checkpoint", str(checkpoint), "--episodes", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("skrl-marl eval: error: --checkpoint ")
    assert str(checkpoint) in err and REFUSED in err
    assert not marker.exists()


# ---------------------------------------------------------------- a diverged run's checkpoint

NAN_CFG = {"rollouts": 4, "mini_batches": 2, "learning_epochs": 1, "observation_preprocessor": RunningStandardScaler}


def _poison(path, uid, name, value):
    """Put ``value`` (NaN, inf) into the first tensor of module ``name`` of agent ``uid`` of checkpoint ``path`` (a
    diverged run's checkpoint); return the tensor's key."""
    modules = torch.load(str(path), weights_only=True)
    state = modules[uid][name]
    key, tensors = (next(iter(state["state"])), state["state"]) if "state" in state else (None, state)
    tensors = tensors if key is None else tensors[key]
    field = next(k for k, t in tensors.items() if torch.is_tensor(t) and t.is_floating_point() and t.numel() > 1)
    tensors[field].view(-1)[1] = value
    torch.save(modules, str(path))
    return field


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("policy", float("nan")),
        ("value", float("inf")),
        ("optimizer", float("nan")),
        ("observation_preprocessor", float("nan")),
    ],
)
def test_load_refuses_non_finite_weights_naming_file_agent_and_module(name, value, tmp_path):
    env = spread(num_envs=4, num_agents=2)
    agent = drive(make_agent(env, cfg=NAN_CFG), env, 8)  # Adam has moments to poison
    path = tmp_path / "diverged.pt"
    agent.save(str(path))
    field = _poison(path, "agent_1", name, value)
    fresh = make_agent(env, cfg=NAN_CFG)
    before = params(fresh.group_of["agent_0"].policy).clone()
    with pytest.raises(ValueError) as error:
        fresh.load(str(path))
    message = str(error.value)
    assert "\n" not in message and str(path) in message and "'agent_1'" in message and f"'{name}'" in message
    assert field in message and ("NaN" if value != value else "inf") in message, message
    assert torch.equal(params(fresh.group_of["agent_0"].policy), before)  # refused before anything loaded


def test_eval_and_resume_refuse_a_diverged_checkpoint_naming_it(tmp_path, capsys):
    out = tmp_path / "runs"
    argv = ["train", "--env", "builtin:spread", "--num-envs", "4", "--timesteps", "20", "--out", str(out)]
    assert cli.main([*argv, "--no-progress"]) == 0
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    checkpoint = run_dir / "checkpoints" / "final.pt"
    _poison(checkpoint, "agent_2", "policy", float("nan"))
    capsys.readouterr()
    export = ["export", str(run_dir), "--out", str(tmp_path / "play.pt")]
    for command in (
        ["eval", "--checkpoint", str(run_dir)],
        ["train", "--resume", str(run_dir), "--timesteps", "30"],
        export,
    ):
        assert cli.main(command) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "Traceback" not in err, err
        assert str(checkpoint) in err and "'agent_2'" in err and "'policy'" in err and "NaN" in err, err
    assert not (tmp_path / "play.pt").exists()


# ---------------------------------------------------------------- what save() writes still loads

SCHEDULERS = [
    (KLAdaptiveLR, {"kl_threshold": 1e-4}),  # a small threshold, so the KL moves the learning rate
    (torch.optim.lr_scheduler.ConstantLR, {"factor": 0.5, "total_iters": 3}),
    (torch.optim.lr_scheduler.LinearLR, {"start_factor": 0.5, "total_iters": 3}),
    (torch.optim.lr_scheduler.ExponentialLR, {"gamma": 0.9}),
    (torch.optim.lr_scheduler.StepLR, {"step_size": 2, "gamma": 0.5}),
]


def _assert_equal(a, b, where):
    """Nested state dicts are equal: tensors element for element, everything else with ``==``."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), where
        for key in a:
            _assert_equal(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_equal(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def _round_trip(agent, fresh, path, expected_modules):
    agent.save(str(path))
    # what save() wrote is tensors and plain containers only: torch's weights-only unpickler takes it as is
    assert set(torch.load(str(path), weights_only=True)) == set(agent.possible_agents)
    fresh.load(str(path))
    for uid in agent.possible_agents:
        modules, loaded = agent.checkpoint_modules[uid], fresh.checkpoint_modules[uid]
        assert set(modules) == set(loaded) == expected_modules
        for name, module in modules.items():
            _assert_equal(module.state_dict(), loaded[name].state_dict(), f"{uid}.{name}")


@pytest.mark.parametrize(("scheduler", "kwargs"), SCHEDULERS, ids=[s.__name__ for s, _ in SCHEDULERS])
def test_mappo_round_trip_with_every_module_kind(scheduler, kwargs, tmp_path):
    env = spread(num_envs=4, num_agents=2)
    cfg = {
        "rollouts": 4,
        "mini_batches": 2,
        "learning_epochs": 2,
        "learning_rate_scheduler": scheduler,
        "learning_rate_scheduler_kwargs": kwargs,
        "observation_preprocessor": RunningStandardScaler,
        "state_preprocessor": RunningStandardScaler,
        "value_preprocessor": ValueNorm,
        "mixed_precision": True,
    }
    agent = drive(make_agent(env, cfg=cfg), env, 12)
    fresh = make_agent(env, cfg=cfg)
    assert agent.scaler.is_enabled() and isinstance(agent.group_of["agent_0"].schedulers[0], scheduler)
    assert not torch.equal(params(agent.group_of["agent_0"].policy), params(fresh.group_of["agent_0"].policy))
    expected = {"policy", "value", "optimizer", "scheduler", "scaler", "progress"}
    expected |= {"observation_preprocessor", "state_preprocessor", "value_preprocessor"}
    _round_trip(agent, fresh, tmp_path / "mappo.pt", expected)


@pytest.mark.parametrize(("scheduler", "kwargs"), SCHEDULERS, ids=[s.__name__ for s, _ in SCHEDULERS])
def test_maddpg_round_trip_with_every_module_kind(scheduler, kwargs, tmp_path):
    env = spread(num_envs=4, num_agents=2)
    cfg = {
        "batch_size": 8,
        "learning_rate_scheduler": scheduler,
        "learning_rate_scheduler_kwargs": kwargs,
        "observation_preprocessor": RunningStandardScaler,
        "state_preprocessor": RunningStandardScaler,
        "mixed_precision": True,
    }
    agent = drive(make_maddpg(env, cfg=cfg), env, 12)
    fresh = make_maddpg(env, cfg=cfg)
    assert agent.scaler.is_enabled()
    expected = {"policy", "target_policy", "critic", "target_critic", "policy_optimizer", "critic_optimizer"}
    expected |= {"policy_scheduler", "critic_scheduler", "observation_preprocessor", "state_preprocessor", "scaler"}
    expected |= {"progress"}
    _round_trip(agent, fresh, tmp_path / "maddpg.pt", expected)
