"""Checkpoints move both ways between skrl 2.1.1's MAPPO/IPPO and ours: each side trains a couple of rollouts with
skrl's SequentialTrainer, saves, and the other side's agent (built with the same models and config) loads the file;
then every tensor (models, preprocessor statistics, Adam moments, step counts, learning rates) is equal, parameter by
parameter in skrl's order, and both act with the same mean actions. Also: the skrl-shared-model merge and restart,
``export_for_skrl`` for what skrl cannot load, the refusals, and bad files."""

from __future__ import annotations

import warnings

import pytest
import torch
from helpers import QUIET, make_maddpg, make_models, one_thread, spread  # noqa: F401  (one_thread: autouse)
from skrl.memories.torch import RandomMemory
from skrl.multi_agents.torch.ippo import IPPO as SkrlIPPO
from skrl.multi_agents.torch.ippo import IPPO_CFG as SkrlIPPO_CFG
from skrl.multi_agents.torch.mappo import MAPPO as SkrlMAPPO
from skrl.multi_agents.torch.mappo import MAPPO_CFG as SkrlMAPPO_CFG
from skrl.resources.preprocessors.torch import RunningStandardScaler
from skrl.trainers.torch import SequentialTrainer
from skrl.utils.model_instantiators.torch import shared_model

from skrl_marl_ext import IPPO, MAPPO, ValueNorm, cli, export_for_skrl

ROLLOUTS, NUM_ENVS = 8, 4
CFG = {"rollouts": ROLLOUTS, "learning_epochs": 2, "mini_batches": 2, "learning_rate": 3e-3}
PREPROCESSORS = ("observation_preprocessor", "state_preprocessor", "value_preprocessor")


def _env(num_agents=2):
    return spread(num_envs=NUM_ENVS, num_agents=num_agents, seed=0)


def _models(env, algo, layout, seed=0, hidden=(16,)):
    """The same models for every call with the same arguments (built from ``seed``)."""
    torch.manual_seed(seed)
    if layout != "policy_is_value":
        return make_models(env, algo, shared=layout == "shared", hidden=hidden)
    models = {}
    for uid in env.possible_agents:
        model = shared_model(
            observation_space=env.observation_space(uid),
            state_space=env.state_space(uid),
            action_space=env.action_space(uid),
            device=env.device,
            structure=["GaussianMixin", "DeterministicMixin"],
            parameters=[
                {"network": [{"name": "net", "input": "OBSERVATIONS", "layers": list(hidden)}], "output": "ACTIONS"},
                {"network": [{"name": "net", "input": "OBSERVATIONS", "layers": list(hidden)}], "output": "ONE"},
            ],
            roles=["policy", "value"],
        )
        models[uid] = {"policy": model, "value": model}
    return models


def _cfg(prep):
    cfg = dict(CFG)
    if prep:
        cfg.update({name: RunningStandardScaler for name in PREPROCESSORS})
    return cfg


def _skrl(env, algo, models, cfg):
    """skrl's own MAPPO/IPPO, from its own config class (per-agent ``*_kwargs``: skrl 2.1.1's ``expand`` refuses
    an empty dict; its preprocessors need ``size`` and ``device`` given)."""
    uids = env.possible_agents
    cfg = dict(cfg)
    sizes = {"observation": env.observation_spaces, "state": env.state_spaces, "value": {uid: 1 for uid in uids}}
    for kind, size in sizes.items():
        cfg[f"{kind}_preprocessor_kwargs"] = {
            uid: {"size": size[uid], "device": env.device} if cfg.get(f"{kind}_preprocessor") else {} for uid in uids
        }
    cfg["learning_rate_scheduler_kwargs"] = {uid: {} for uid in uids}
    cls, cfg_class = (SkrlMAPPO, SkrlMAPPO_CFG) if algo == "mappo" else (SkrlIPPO, SkrlIPPO_CFG)
    return cls(
        possible_agents=uids,
        models=models,
        memories={uid: RandomMemory(memory_size=ROLLOUTS, num_envs=env.num_envs) for uid in uids},
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces,
        action_spaces=env.action_spaces,
        device=env.device,
        cfg=cfg_class(**cfg, experiment=QUIET),
    )


def _ours(env, algo, models, cfg, layout="batched"):
    return (MAPPO if algo == "mappo" else IPPO)(
        possible_agents=env.possible_agents,
        models=models,
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces,
        action_spaces=env.action_spaces,
        device=env.device,
        cfg=dict(cfg, batch_agent_models=layout == "batched", experiment=QUIET),
    )


def _train(agent, env, rollouts=2):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        cfg = {"timesteps": rollouts * ROLLOUTS, "headless": True, "disable_progressbar": True}
        SequentialTrainer(env=env, agents=agent, cfg=cfg).train()


def _parameters(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


# ---------------------------------------------------------------------------------------------------- reading state


def _skrl_adam(agent, uid):
    """skrl's optimiser of ``uid``: ``(parameter, state)`` in its parameter order, and its learning rates."""
    optimizer = agent.optimizers[uid]
    params = [p for group in optimizer.param_groups for p in group["params"]]
    return [(p.detach(), optimizer.state[p]) for p in params], [g["lr"] for g in optimizer.param_groups]


def _our_adam(agent, uid):
    """Our optimiser's part of ``uid``, as :func:`_skrl_adam` gives it (a batched group's stacked tensors sliced)."""
    group = agent.group_of[uid]
    optimizer, index = group.optimizer, group.uids.index(uid)
    pairs = []
    for p in (p for g in optimizer.param_groups for p in g["params"]):
        state = {k: v[index] if group.batched and v.dim() else v for k, v in optimizer.state[p].items()}
        pairs.append((p.detach()[index] if group.batched else p.detach(), state))
    return pairs, [g["lr"] for g in optimizer.param_groups]


def _skrl_preprocessor(agent, uid, name):
    return getattr(agent, f"_{name}")[uid]


def _assert_same_state(skrl_agent, ours, *, prep, optimizer=True):
    """Models, preprocessor statistics and Adam state of every agent equal, parameter by parameter in skrl's order."""
    for uid in ours.possible_agents:
        for role in ("policy", "value"):
            a, b = skrl_agent.models[uid][role].state_dict(), ours.models[uid][role].state_dict()
            assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a), (uid, role)
        for name in PREPROCESSORS if prep else ():
            a = _skrl_preprocessor(skrl_agent, uid, name).state_dict()
            b = ours.checkpoint_modules[uid][name].state_dict()
            assert all(torch.equal(a[k], b[k]) for k in a), (uid, name)
        if not optimizer:
            continue
        (theirs, their_lr), (mine, my_lr) = _skrl_adam(skrl_agent, uid), _our_adam(ours, uid)
        assert set(their_lr) == set(my_lr) and len(theirs) == len(mine)
        for i, ((p, a), (q, b)) in enumerate(zip(theirs, mine, strict=True)):
            assert torch.equal(p, q), (uid, i)  # the same parameter at the same place
            assert set(a) == set(b) == {"step", "exp_avg", "exp_avg_sq"}, (uid, i)
            assert float(a["step"]) == float(b["step"]) > 0, (uid, i)
            assert torch.equal(a["exp_avg"], b["exp_avg"]) and torch.equal(a["exp_avg_sq"], b["exp_avg_sq"]), (uid, i)


def _mean_actions(agent, env):
    """The agent's mean actions (evaluation mode) for random observations and states (the same on every call)."""
    agent.enable_training_mode(False)
    for model in {id(m): m for uid in env.possible_agents for m in agent.models[uid].values()}.values():
        model.eval()
    generator = torch.Generator().manual_seed(0)
    uids = env.possible_agents
    observations = {u: torch.randn(NUM_ENVS, env.observation_space(u).shape[0], generator=generator) for u in uids}
    state = torch.randn(NUM_ENVS, env.state_space(uids[0]).shape[0], generator=generator)
    with torch.no_grad():
        _, outputs = agent.act(observations, {u: state for u in uids}, timestep=0, timesteps=1)
    return {uid: outputs[uid]["mean_actions"] for uid in env.possible_agents}


def _assert_same_actions(a, b, *, exact=True):
    """Bitwise equal; a batched group (one vmapped call) may round otherwise than one model call per agent."""
    for uid in a:
        if exact:
            assert torch.equal(a[uid], b[uid]), uid
        else:
            torch.testing.assert_close(a[uid], b[uid], rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------------------------------- both ways

LAYOUTS = ["batched", "loop", "shared", "policy_is_value"]
CASES = [
    (algo, layout, prep)
    for algo in ("mappo", "ippo")
    for layout in LAYOUTS
    for prep in (False, True)
    if layout != "policy_is_value" or (algo == "ippo" and not prep)
]


@pytest.mark.parametrize(("algo", "layout", "prep"), CASES, ids=lambda v: str(v))
def test_checkpoints_move_both_ways(algo, layout, prep, tmp_path):
    cfg, shared = _cfg(prep), layout == "shared"
    # skrl writes, ours reads
    env = _env()
    writer = _skrl(env, algo, _models(env, algo, layout), cfg)
    _train(writer, env)
    writer.save(str(tmp_path / "skrl.pt"))
    reader = _ours(env, algo, _models(env, algo, layout), cfg, layout)
    if layout == "batched":
        assert reader.groups[0].batched
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reader.load(str(tmp_path / "skrl.pt"))
    messages = [str(w.message) for w in caught]
    if shared:  # skrl stepped one optimiser (and kept one set of statistics) per agent over the shared models
        assert [m for m in messages if "optimiser restarts" in m] == [messages[0]]
        assert len([m for m in messages if "merged" in m]) == (1 if prep else 0)
        assert len(messages) == (2 if prep else 1)
        _assert_same_state(writer, reader, prep=False, optimizer=False)
        if prep:
            _assert_merged_statistics(writer, reader)
    else:
        assert messages == []
        _assert_same_state(writer, reader, prep=prep)
    if not (shared and prep):  # merged statistics act otherwise than each agent's own
        _assert_same_actions(_mean_actions(writer, env), _mean_actions(reader, env), exact=layout != "batched")
    before = torch.cat([_parameters(m) for m in reader.models[env.possible_agents[-1]].values()])
    _train(reader, _env())  # ours trains on from skrl's file
    after = torch.cat([_parameters(m) for m in reader.models[env.possible_agents[-1]].values()])
    assert torch.isfinite(after).all() and not torch.equal(before, after)

    # ours writes, skrl reads
    env = _env()
    writer = _ours(env, algo, _models(env, algo, layout), cfg, layout)
    _train(writer, env)
    writer.save(str(tmp_path / "ours.pt"))
    reader = _skrl(env, algo, _models(env, algo, layout, seed=1), cfg)
    reader.load(str(tmp_path / "ours.pt"))  # skrl's own load, unchanged
    _assert_same_state(reader, writer, prep=prep)
    _assert_same_actions(_mean_actions(writer, env), _mean_actions(reader, env), exact=layout != "batched")


def _assert_merged_statistics(skrl_agent, ours):
    """The shared group's statistics hold exactly what skrl's agents' statistics hold together (from sums)."""
    uids = ours.possible_agents
    for name in PREPROCESSORS:
        theirs = [_skrl_preprocessor(skrl_agent, uid, name) for uid in uids]
        count = sum(s.current_count for s in theirs)
        total = sum(s.current_count * s.running_mean for s in theirs)
        squares = sum(s.current_count * (s.running_variance + s.running_mean**2) for s in theirs)
        mean = total / count
        merged = ours.checkpoint_modules[uids[0]][name]
        assert all(ours.checkpoint_modules[uid][name] is merged for uid in uids)
        assert not torch.equal(theirs[0].running_mean, theirs[1].running_mean)  # there was something to merge
        assert torch.equal(merged.current_count, count)
        torch.testing.assert_close(merged.running_mean, mean, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(merged.running_variance, squares / count - mean**2, rtol=1e-9, atol=1e-12)


def test_our_shared_group_loads_its_own_file_without_warnings(tmp_path):
    env = _env()
    writer = _ours(env, "mappo", _models(env, "mappo", "shared"), _cfg(True), "shared")
    _train(writer, env)
    writer.save(str(tmp_path / "ours.pt"))
    reader = _ours(env, "mappo", _models(env, "mappo", "shared", seed=1), _cfg(True), "shared")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reader.load(str(tmp_path / "ours.pt"))
    a, b = writer.groups[0].optimizer.state_dict(), reader.groups[0].optimizer.state_dict()
    assert all(torch.equal(a["state"][k]["exp_avg"], b["state"][k]["exp_avg"]) for k in a["state"])
    assert a["param_groups"] == b["param_groups"]


# ---------------------------------------------------------------------------------------------------- export


def test_what_skrl_cannot_load_is_exported_for_play(tmp_path, capsys):
    """Two learning rates (two parameter groups) and a ValueNorm: skrl's load fails on the file; the export loads and
    skrl's agent acts with our mean actions."""
    env = _env()
    cfg = dict(_cfg(True), learning_rate=(3e-3, 1e-3), value_preprocessor=ValueNorm)
    writer = _ours(env, "mappo", _models(env, "mappo", "batched"), cfg)
    _train(writer, env)
    path, exported = tmp_path / "ours.pt", tmp_path / "play.pt"
    writer.save(str(path))
    skrl_cfg = dict(_cfg(True), value_preprocessor=None)
    with pytest.raises(ValueError, match="different number of parameter groups"):
        _skrl(env, "mappo", _models(env, "mappo", "batched", seed=1), skrl_cfg).load(str(path))

    left_out = export_for_skrl(path, exported)
    assert "optimizer" in left_out and "ValueNorm" in left_out
    saved = torch.load(exported, weights_only=True)
    assert {name for modules in saved.values() for name in modules} == {
        "policy",
        "value",
        "observation_preprocessor",
        "state_preprocessor",
    }
    reader = _skrl(env, "mappo", _models(env, "mappo", "batched", seed=1), skrl_cfg)
    reader.load(str(exported))
    _assert_same_state(reader, writer, prep=False, optimizer=False)
    _assert_same_actions(_mean_actions(writer, env), _mean_actions(reader, env), exact=False)

    # the command line writes the same file and says in one line what it leaves out
    assert cli.main(["export", str(path), "--out", str(tmp_path / "cli.pt")]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and str(tmp_path / "cli.pt") in out[0] and left_out in out[0]
    again = torch.load(tmp_path / "cli.pt", weights_only=True)
    assert all(torch.equal(again[u][n][k], saved[u][n][k]) for u in saved for n in saved[u] for k in saved[u][n])


def test_export_keeps_a_running_standard_scaler_value_preprocessor_and_maddpg_policies(tmp_path):
    env = _env()
    ours = _ours(env, "ippo", _models(env, "ippo", "loop"), _cfg(True), "loop")
    ours.save(str(tmp_path / "ippo.pt"))
    export_for_skrl(tmp_path / "ippo.pt", tmp_path / "ippo_play.pt")
    assert set(torch.load(tmp_path / "ippo_play.pt", weights_only=True)["agent_0"]) == {
        "policy",
        "value",
        *PREPROCESSORS,
    }

    maddpg = make_maddpg(env, cfg={"observation_preprocessor": RunningStandardScaler})
    maddpg.save(str(tmp_path / "maddpg.pt"))
    export_for_skrl(tmp_path / "maddpg.pt", tmp_path / "maddpg_play.pt")
    saved = torch.load(tmp_path / "maddpg_play.pt", weights_only=True)
    assert set(saved) == set(env.possible_agents)
    assert all(set(modules) == {"policy", "observation_preprocessor"} for modules in saved.values())
    policy = maddpg.models["agent_1"]["policy"].state_dict()
    assert all(torch.equal(saved["agent_1"]["policy"][k], policy[k]) for k in policy)


def test_export_of_a_bad_file_is_one_line(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("not a checkpoint\n")
    assert cli.main(["export", str(tmp_path / "notes.txt"), "--out", str(tmp_path / "x.pt")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a file written by torch.save" in err
    assert not (tmp_path / "x.pt").exists()


# ---------------------------------------------------------------------------------------------------- refusals


def _skrl_file(tmp_path, env, cfg=None, hidden=(16,)):
    agent = _skrl(env, "mappo", _models(env, "mappo", "loop", hidden=hidden), cfg or dict(CFG))
    agent.save(str(tmp_path / "skrl.pt"))
    return str(tmp_path / "skrl.pt")


@pytest.mark.parametrize(
    ("what", "match"),
    [
        ("other agents", r"missing: \['agent_2'\]"),
        ("other shapes", r"'agent_0' module 'policy' does not fit"),
        ("a preprocessor ours lacks", r"has modules .*observation_preprocessor.* but this agent expects"),
        ("a preprocessor the file lacks", r"but this agent expects .*observation_preprocessor"),
    ],
)
def test_real_mismatches_of_a_skrl_file_are_refused(what, match, tmp_path):
    env = _env()
    cfg, ours_env, hidden = dict(CFG), env, (16,)
    if what == "other agents":
        ours_env = _env(num_agents=3)
    elif what == "other shapes":
        hidden = (24,)
    path = _skrl_file(tmp_path, env, _cfg(True) if what == "a preprocessor ours lacks" else cfg)
    if what == "a preprocessor the file lacks":
        cfg = _cfg(True)
    ours = _ours(ours_env, "mappo", _models(ours_env, "mappo", "loop", hidden=hidden), cfg, "loop")
    with pytest.raises(ValueError, match=match) as error:
        ours.load(path)
    assert "\n" not in str(error.value)


def test_a_skrl_file_lacks_only_modules_skrl_never_writes(tmp_path):
    """Scheduler and grad scaler (and any module skrl does not write) start fresh; ours of our own file stay strict."""
    env = _env()
    cfg = dict(CFG, learning_rate_scheduler=torch.optim.lr_scheduler.StepLR)
    cfg["learning_rate_scheduler_kwargs"] = {"step_size": 2, "gamma": 0.5}
    path = _skrl_file(tmp_path, env)
    ours = _ours(env, "mappo", _models(env, "mappo", "loop"), cfg, "loop")
    ours.load(path)
    ours.save(str(tmp_path / "ours.pt"))
    modules = torch.load(tmp_path / "ours.pt", weights_only=True)
    del modules["agent_0"]["scheduler"]
    torch.save(modules, tmp_path / "partial.pt")
    with pytest.raises(ValueError, match=r"but this agent expects .*'scheduler'"):
        ours.load(str(tmp_path / "partial.pt"))


def test_a_skrl_optimizer_that_does_not_map_restarts_with_one_warning(tmp_path):
    env = _env()
    path = _skrl_file(tmp_path, env)
    modules = torch.load(path, weights_only=True)
    for uid in env.possible_agents:  # an optimiser over other parameters than policy and value
        modules[uid]["optimizer"]["param_groups"][0]["params"].pop()
    torch.save(modules, tmp_path / "other.pt")
    ours = _ours(env, "mappo", _models(env, "mappo", "loop", seed=1), dict(CFG), "loop")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ours.load(str(tmp_path / "other.pt"))
    (warning,) = caught
    assert "optimiser restarts" in str(warning.message) and "\n" not in str(warning.message)
    assert all(not ours.group_of[uid].optimizer.state for uid in env.possible_agents)
    policy = modules["agent_0"]["policy"]
    assert all(torch.equal(ours.models["agent_0"]["policy"].state_dict()[k], policy[k]) for k in policy)
    for uid in env.possible_agents:  # in our format the same file is refused
        modules[uid]["scaler"] = ours.scaler.state_dict()
    torch.save(modules, tmp_path / "ours.pt")
    with pytest.raises(ValueError, match="'optimizer' does not fit"):
        ours.load(str(tmp_path / "ours.pt"))


# ---------------------------------------------------------------------------------------------------- bad files


def _bad_files(tmp_path, env):
    good = tmp_path / "good.pt"
    _ours(env, "mappo", _models(env, "mappo", "loop"), dict(CFG), "loop").save(str(good))
    data = good.read_bytes()
    policy = make_models(env, hidden=(16,))["agent_0"]["policy"]
    adam = torch.optim.Adam(policy.parameters())
    files = {
        "truncated": data[: len(data) // 2],
        "text": b"policy: not a checkpoint\n",
        "empty": b"",
    }
    objects = {
        "list": [policy.state_dict()],
        "state_dict": policy.state_dict(),
        "single_agent": {"policy": policy.state_dict(), "value": policy.state_dict(), "optimizer": adam.state_dict()},
    }
    for name, content in files.items():
        (tmp_path / f"{name}.pt").write_bytes(content)
    for name, obj in objects.items():
        torch.save(obj, tmp_path / f"{name}.pt")
    return {name: tmp_path / f"{name}.pt" for name in [*files, *objects]}


BAD = {
    "truncated": "is damaged or truncated",
    "text": "is not a file written by torch.save",
    "empty": "is empty",
    "list": "holds a list, not a multi-agent checkpoint",
    "state_dict": "holds one state dict of",
    "single_agent": "is a single-agent checkpoint (modules ['optimizer', 'policy', 'value'])",
}


def test_bad_files_are_refused_in_one_line_naming_the_file(tmp_path):
    env = _env()
    ours = _ours(env, "mappo", _models(env, "mappo", "loop"), dict(CFG), "loop")
    for name, path in _bad_files(tmp_path, env).items():
        with pytest.raises(ValueError) as error:
            ours.load(str(path))
        message = str(error.value)
        assert "\n" not in message and str(path) in message and BAD[name] in message, (name, message)
        assert message.startswith("MAPPO.load: "), name


def test_skrl_layout_is_written_for_one_learning_rate_only(tmp_path):
    env = _env()
    for learning_rate, groups in ((3e-3, 1), ((3e-3, 1e-3), 2)):
        ours = _ours(env, "ippo", _models(env, "ippo", "batched"), dict(CFG, learning_rate=learning_rate))
        ours.save(str(tmp_path / "ours.pt"))
        optimizer = torch.load(tmp_path / "ours.pt", weights_only=True)["agent_0"]["optimizer"]
        assert len(optimizer["param_groups"]) == groups
        sizes = [len(list(ours.models["agent_0"][r].parameters())) for r in ("policy", "value")]
        assert [i for g in optimizer["param_groups"] for i in g["params"]] == list(range(sum(sizes)))
        assert [g["lr"] for g in optimizer["param_groups"]] == ([3e-3, 1e-3] if groups == 2 else [3e-3])
