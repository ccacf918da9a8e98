"""HAPPO: the sequential update by numbers (one agent is PPO; the second agent's advantages carry the first agent's
post-update ratio), the order of the agents, training through skrl's trainer, the Runner and the CLI on agents of
different spaces, checkpoints and resume."""

from __future__ import annotations

import inspect
import json
import os
import warnings

import pytest
import torch
from helpers import QUIET, drive, make_agent, make_models, one_thread, params, spread  # noqa: F401
from resume_helpers import all_params, restore_on_reset, train, train_until_checkpoint
from skrl.resources.preprocessors.torch import RunningStandardScaler

from skrl_marl_ext import HAPPO, HAPPO_CFG, MAPPO, ValueNorm, cli, functional
from skrl_marl_ext.algorithms import happo as happo_module
from skrl_marl_ext.algorithms.mappo import OnPolicyAgent
from skrl_marl_ext.runner import Runner
from skrl_marl_ext.trainers import StepTrainer

CONFIGS = os.path.join(os.path.dirname(__file__), os.pardir, "skrl_marl_ext", "configs")


def make_happo(env, cfg=None, models=None):
    return HAPPO(
        possible_agents=env.possible_agents,
        models=models if models is not None else make_models(env),
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces,
        action_spaces=env.action_spaces,
        device=env.device,
        cfg={"experiment": QUIET, **(cfg or {})},
    )


def speaker_listener(num_envs=4, seed=0):
    """MPE's speaker (observation 3, Discrete(3)) and listener (observation 11, Discrete(5)), batched."""
    pytest.importorskip("mpe2")
    from skrl_marl_ext.envs import make_pettingzoo_env

    return make_pettingzoo_env("mpe2.simple_speaker_listener_v4", num_envs=num_envs, seed=seed, max_cycles=25)


class Spy:
    """Records the arguments of every ``ppo_loss`` call (one per mini-batch) and passes them on."""

    def __init__(self, monkeypatch):
        self.calls = []
        original = functional.ppo_loss

        def spy(**kwargs):
            call = {k: v.detach().clone() for k, v in kwargs.items() if torch.is_tensor(v)}
            call["advantages_require_grad"] = kwargs["advantages"].requires_grad
            self.calls.append(call)
            return original(**kwargs)

        monkeypatch.setattr(OnPolicyAgent, "ppo_loss", staticmethod(spy))


def update_orders(agent):
    """Per update, the agents in the order their policies were trained (policy calls with taken actions)."""
    orders, seen = [], []
    for uid in agent.possible_agents:
        policy = agent.models[uid]["policy"]
        act = policy.act

        def traced(inputs, role="", uid=uid, act=act):
            if "taken_actions" in inputs and (not seen or seen[-1] != uid):
                seen.append(uid)
            return act(inputs, role=role)

        policy.act = traced

    def close_update():
        orders.append(list(seen))
        seen.clear()

    return orders, close_update


# ---------------------------------------------------------------------------------------------------- by numbers


def test_one_agent_update_equals_mappo():
    results = []
    for build in (lambda env, m: make_agent(env, "mappo", models=m), lambda env, m: make_happo(env, models=m)):
        torch.manual_seed(0)
        env = spread(num_envs=4, num_agents=1, seed=1)
        agent = build(env, make_models(env))
        initial = all_params(agent)
        torch.manual_seed(1)
        drive(agent, env, 32)  # two updates of 16 steps
        results.append(all_params(agent))
        assert not torch.equal(initial, results[-1])
    mappo, happo = results
    torch.testing.assert_close(happo, mappo, rtol=0, atol=1e-6)


def _run_one_update(algo, monkeypatch, masked):
    """One update (one epoch, one mini-batch in order) of speaker then listener; the speaker masked at ``masked``
    (step, env) pairs. Returns the agent, its ppo_loss calls, and each agent's rollout (observations, actions,
    log-probabilities at collection) in the rollout's sample order (step-major)."""
    torch.manual_seed(0)
    env = speaker_listener(num_envs=4, seed=0)
    cfg = {"rollouts": 8, "learning_epochs": 1, "mini_batches": 1, "mini_batch_order": "sequential"}
    cfg.update({"update_order": "fixed"} if algo == "happo" else {"batch_agent_models": False}, experiment=QUIET)
    models = make_models(env)
    agent = make_happo(env, cfg, models) if algo == "happo" else make_agent(env, "mappo", cfg=cfg, models=models)
    spy = Spy(monkeypatch)
    rollout = {uid: {"observations": [], "actions": [], "log_prob": []} for uid in env.possible_agents}
    act, record = agent.act, agent.record_transition

    def act_and_keep(observations, states, **kwargs):
        actions, outputs = act(observations, states, **kwargs)
        for uid in env.possible_agents:
            rollout[uid]["log_prob"].append(outputs[uid]["log_prob"].clone())
        return actions, outputs

    def record_and_keep(**step):
        for uid in env.possible_agents:
            rollout[uid]["observations"].append(step["observations"][uid].clone())
            rollout[uid]["actions"].append(step["actions"][uid].clone())
        record(**step)

    agent.act, agent.record_transition = act_and_keep, record_and_keep

    def infos_fn(t, infos):
        mask = torch.ones(4, 1, dtype=torch.bool)
        mask[[n for step, n in masked if step == t]] = False
        infos["agent_mask"] = {**infos.get("agent_mask", {}), "speaker_0": mask}
        return infos

    torch.manual_seed(1)
    drive(agent, env, 8, infos_fn=infos_fn)
    return agent, spy.calls, {uid: {k: torch.cat(v) for k, v in r.items()} for uid, r in rollout.items()}


def test_second_agent_sees_the_first_agents_post_update_ratio(monkeypatch):
    masked = [(0, 1), (3, 2), (7, 0)]
    happo, calls, rollout = _run_one_update("happo", monkeypatch, masked)
    mappo, mappo_calls, mappo_rollout = _run_one_update("mappo", monkeypatch, masked)
    speaker, listener = rollout["speaker_0"], rollout["listener_0"]
    assert torch.equal(listener["actions"], mappo_rollout["listener_0"]["actions"])  # the same rollout
    # one loss per agent, in possible_agents order (update_order="fixed"), told apart by their behaviour log-probs
    assert len(calls) == 2
    assert torch.equal(calls[0]["old_log_prob"].view(-1), speaker["log_prob"].view(-1))
    assert torch.equal(calls[1]["old_log_prob"].view(-1), listener["log_prob"].view(-1))
    # the first agent: MAPPO's advantages, MAPPO's update
    torch.testing.assert_close(calls[0]["advantages"], mappo_calls[0]["advantages"], rtol=0, atol=0)
    for role in ("policy", "value"):
        assert torch.equal(params(happo.models["speaker_0"][role]), params(mappo.models["speaker_0"][role]))
    # M from the speaker's policy as its update left it, on the rollout, against the log-probs at collection
    with torch.no_grad():
        inputs = {"observations": speaker["observations"], "taken_actions": speaker["actions"]}
        _, outputs = happo.models["speaker_0"]["policy"].act(inputs, role="policy")
    ratio = torch.exp(outputs["log_prob"] - speaker["log_prob"])
    alive = torch.ones(8, 4, 1, dtype=torch.bool)
    for step, n in masked:
        alive[step, n] = False
    factor = torch.where(alive.view(-1, 1), ratio, 1.0)
    assert not torch.allclose(factor, torch.ones_like(factor))  # the speaker moved
    assert calls[0]["mask"].view(-1).tolist() == alive.view(-1).tolist()
    expected = mappo_calls[1]["advantages"] * factor.view(1, -1, 1)
    torch.testing.assert_close(calls[1]["advantages"], expected, rtol=1e-5, atol=1e-6)
    masked_rows = (~alive).view(-1).nonzero().view(-1)
    assert torch.equal(calls[1]["advantages"][0, masked_rows], mappo_calls[1]["advantages"][0, masked_rows])
    assert not calls[1]["advantages_require_grad"]  # M is held constant
    # the listener's update differs from MAPPO's by exactly that weighting
    assert not torch.equal(params(happo.models["listener_0"]["policy"]), params(mappo.models["listener_0"]["policy"]))


# ---------------------------------------------------------------------------------------------------- the order


def _orders(update_order, seed, updates=6):
    torch.manual_seed(seed)
    env = spread(num_envs=2, num_agents=3, seed=0)
    agent = make_happo(env, {"rollouts": 4, "learning_epochs": 1, "mini_batches": 1, "update_order": update_order})
    orders, close_update = update_orders(agent)
    post_interaction = agent.post_interaction

    def post_and_close(**kwargs):
        post_interaction(**kwargs)
        if agent.progress.timestep % 4 == 0:
            close_update()

    agent.post_interaction = post_and_close
    torch.manual_seed(100 + seed)  # acting draws from torch's RNG; the order does not
    drive(agent, env, 4 * updates)
    return agent, orders


def test_fixed_order_follows_possible_agents_and_random_order_is_reproducible_per_seed():
    agent, orders = _orders("fixed", seed=0)
    assert orders == [agent.possible_agents] * 6
    agent, first = _orders("random", seed=0)
    _, again = _orders("random", seed=0)
    _, other = _orders("random", seed=1)
    assert first == again
    assert all(sorted(order) == agent.possible_agents for order in first)
    assert len({tuple(order) for order in first}) > 1  # a fresh order each update
    assert first != other
    # update k's order is update_order(seed, k): the seed is torch's initial seed, taken without drawing from the RNG
    assert agent.progress.order_seed == 0 and agent.progress.updates == 6
    names = agent.possible_agents
    assert first == [[names[i] for i in happo_module.update_order(seed=0, update=k, size=3)] for k in range(6)]


def test_config_is_checked_and_shared_models_warn_once():
    env = spread(num_envs=2, num_agents=3, seed=0)
    with pytest.raises(ValueError, match=r"HAPPO: cfg.update_order must be one of \['random', 'fixed'\]"):
        make_happo(env, {"update_order": "sorted"})
    with pytest.raises(ValueError, match="cfg.batch_agent_models=True .* set batch_agent_models=False"):
        make_happo(env, {"batch_agent_models": True})
    assert HAPPO_CFG().batch_agent_models is False and HAPPO_CFG().update_order == "random"
    with warnings.catch_warnings():  # models of their own: one group per agent, no warning
        warnings.simplefilter("error")
        agent = make_happo(env)
    assert [group.uids for group in agent.groups] == [[uid] for uid in env.possible_agents]
    with pytest.warns(UserWarning, match=r"share their models, so they cannot be updated one after another") as caught:
        agent = make_happo(env, models=make_models(env, shared=True))
    assert len(caught) == 1
    drive(agent, env, 32)  # the shared group trains as MAPPO would


def test_constructor_names_mappos_keyword_only_arguments():
    """help() and IDEs list HAPPO's arguments, which are MAPPO's (and skrl's), keyword-only."""
    happo, mappo = inspect.signature(HAPPO).parameters, inspect.signature(MAPPO).parameters
    assert list(happo) == list(mappo)
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in happo.values())
    assert [p.default for p in happo.values()] == [p.default for p in mappo.values()]


def test_shared_group_is_updated_as_mappo_would(monkeypatch):
    """One shared group, then nothing after it: HAPPO is MAPPO (M = 1 for the only group)."""
    results = []
    for algo in ("mappo", "happo"):
        torch.manual_seed(0)
        env = spread(num_envs=4, num_agents=2, seed=1)
        models = make_models(env, shared=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            agent = make_happo(env, models=models) if algo == "happo" else make_agent(env, "mappo", models=models)
        torch.manual_seed(1)
        drive(agent, env, 32)
        results.append(all_params(agent))
    torch.testing.assert_close(results[1], results[0], rtol=0, atol=1e-6)


# ---------------------------------------------------------------------------------------------------- training


def test_trains_through_skrls_trainer_on_agents_of_different_spaces():
    env = speaker_listener(num_envs=4)
    torch.manual_seed(0)
    agent = make_happo(
        env,
        {"rollouts": 16, "value_preprocessor": ValueNorm, "observation_preprocessor": RunningStandardScaler},
    )
    assert env.observation_spaces["speaker_0"] != env.observation_spaces["listener_0"]
    assert env.action_spaces["speaker_0"] != env.action_spaces["listener_0"]
    before = {uid: params(agent.models[uid]["policy"]) for uid in env.possible_agents}
    train(env, agent, 48)  # skrl's SequentialTrainer
    for uid in env.possible_agents:
        assert not torch.equal(before[uid], params(agent.models[uid]["policy"]))
    assert agent.progress.updates == 3


def test_trains_through_skrls_step_trainer():
    """skrl's StepTrainer (one call per env step, as Isaac Lab's play loops drive agents) updates every agent."""
    env = speaker_listener(num_envs=4)
    torch.manual_seed(0)
    agent = make_happo(env, {"rollouts": 8})
    before = {uid: params(agent.models[uid]["policy"]) for uid in env.possible_agents}
    trainer = StepTrainer(env=env, agents=agent, cfg={"timesteps": 16, "headless": True, "disable_progressbar": True})
    for _ in range(16):
        trainer.train()
    assert agent.progress.updates == 2
    for uid in env.possible_agents:
        assert not torch.equal(before[uid], params(agent.models[uid]["policy"]))


def test_runner_builds_happo_from_yaml_and_trains():
    env = speaker_listener(num_envs=4)
    cfg = Runner.load_cfg_from_yaml(os.path.join(CONFIGS, "happo.yaml"))
    # Isaac Lab's skrl YAMLs carry these off-policy keys; skrl's Runner drops them for MAPPO, ours for HAPPO
    cfg["agent"].update(experiment=QUIET, rollouts=16, update_order="fixed", random_timesteps=0, learning_starts=0)
    cfg["trainer"].update(timesteps=32, disable_progressbar=True)
    runner = Runner(env, cfg)
    agent = runner.agent
    assert type(agent) is HAPPO and agent.cfg.update_order == "fixed"
    assert all(memory.memory_size == 16 for memory in agent.memories.values())
    before = all_params(agent)
    runner.run("train")
    assert not torch.equal(before, all_params(agent))


def test_cli_trains_happo(tmp_path, capsys):
    pytest.importorskip("mpe2")
    env = "pettingzoo:mpe2.simple_speaker_listener_v4"
    argv = ["train", "--algo", "happo", "--env", env, "--timesteps", "200", "--num-envs", "2"]
    assert cli.main([*argv, "--out", str(tmp_path), "--no-progress"]) == 0
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    run = json.loads((run_dir / "run.json").read_text())
    assert (run["algo"], run["config"]["agent"]["class"]) == ("happo", "HAPPO")
    modules = torch.load(run_dir / "checkpoints" / "final.pt", weights_only=True)
    assert modules["speaker_0"]["progress"]["updates"] == 2  # two rollouts of 100 steps


# ---------------------------------------------------------------------------------------------------- checkpoints


def _build_resumable(directory=None, seed=0):
    torch.manual_seed(seed)
    env = spread(num_envs=4, num_agents=3, seed=3)
    experiment = dict(QUIET)
    if directory is not None:
        experiment.update(directory=str(directory), experiment_name="run", checkpoint_interval=8)
    cfg = {"rollouts": 8, "learning_epochs": 2, "mini_batches": 2, "experiment": experiment}
    cfg.update(observation_preprocessor=RunningStandardScaler, value_preprocessor=ValueNorm)
    torch.manual_seed(0)  # the same models whatever the order seed
    models = make_models(env)
    torch.manual_seed(seed)
    return env, make_happo(env, cfg, models)


def _resume(checkpoint, extra_path, *, seed):
    env, agent = _build_resumable(seed=seed)
    agent.load(str(checkpoint))
    extra = torch.load(extra_path, weights_only=False)
    restore_on_reset(env, extra["env"])
    torch.set_rng_state(extra["rng"])
    train(env, agent, 16)
    return agent


def test_checkpoint_round_trip_and_resume_continue_the_same_orders(tmp_path):
    env, agent = _build_resumable()
    train(env, agent, 32)  # 4 updates
    uninterrupted = all_params(agent)

    env, agent = _build_resumable(tmp_path)
    extra = tmp_path / "extra.pt"
    train_until_checkpoint(env, agent, 32, stop_at=16, extra_path=extra)
    checkpoint = tmp_path / "run" / "checkpoints" / "agent_16.pt"
    saved = torch.load(checkpoint, weights_only=True)
    assert {uid: saved[uid]["progress"] for uid in saved} == {
        uid: {"timestep": 16, "order_seed": 0, "updates": 2} for uid in agent.possible_agents
    }
    # round trip: a new agent (another order seed) loads the models and the order's seed and count
    _, loaded = _build_resumable(seed=7)
    assert loaded.progress.order_seed == 7
    loaded.load(str(checkpoint))
    assert (loaded.progress.order_seed, loaded.progress.updates) == (0, 2)
    assert torch.equal(all_params(loaded), all_params(agent))

    resumed = _resume(checkpoint, extra, seed=7)
    assert torch.equal(all_params(resumed), uninterrupted)
    # the order's seed is what makes it equal: without it the resumed run draws other orders
    for uid in saved:
        del saved[uid]["progress"]["order_seed"]
    torch.save(saved, tmp_path / "no_seed.pt")
    other = _resume(tmp_path / "no_seed.pt", extra, seed=7)
    assert other.progress.order_seed == 7
    assert not torch.equal(all_params(other), uninterrupted)


def test_recurrent_models_mixed_precision_and_maskstrain(monkeypatch):
    """The core's features under the sequential update: recurrent policies (the ratio re-evaluated on whole
    sequences), mixed precision, ValueNorm, agent masks; the later agents' advantages are weighted, and finite."""
    from test_recurrent import rnn_models

    torch.manual_seed(0)
    env = spread(num_envs=4, num_agents=2, seed=0, continuous=True)
    cfg = {"rollouts": 8, "learning_epochs": 2, "mini_batches": 2, "mixed_precision": True, "update_order": "fixed"}
    agent = make_happo(env, {**cfg, "value_preprocessor": ValueNorm}, rnn_models(env, length=4))
    spy = Spy(monkeypatch)
    before = all_params(agent)

    def infos_fn(t, infos):
        mask = torch.ones(4, 1, dtype=torch.bool)
        mask[t % 4] = t % 3 != 0
        infos["agent_mask"] = {"agent_0": mask}
        return infos

    drive(agent, env, 16, infos_fn=infos_fn)
    after = all_params(agent)
    assert torch.isfinite(after).all() and not torch.equal(before, after)
    # per update: agent_0's 4 mini-batches with M = 1, then agent_1's with M from agent_0's recurrent policy
    assert len(spy.calls) == 16
    for update in (0, 8):
        first, second = spy.calls[update : update + 4], spy.calls[update + 4 : update + 8]
        assert all(torch.isfinite(call["advantages"]).all() for call in first + second)
        assert first[0]["mask"] is not None and second[0].get("mask") is None
    # with the same rollout and M = 1 the second agent's advantages are standardised (mean 0 over the rollout);
    # weighted by M they are not
    second = torch.cat([call["advantages"].view(-1) for call in spy.calls[12:16]])
    assert abs(float(second.mean())) > 1e-4


def _distributed_worker(rank, port, out_dir):
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        torch.manual_seed(100 + rank)  # another seed per rank: the order's seed must come from rank 0
        env = spread(num_envs=4, num_agents=3, seed=10 + rank)
        agent = make_happo(env, {"rollouts": 8, "learning_epochs": 1, "mini_batches": 2})
        train(env, agent, 32)
        result = {"params": all_params(agent), "seed": agent.progress.order_seed}
        torch.save(result, os.path.join(out_dir, f"result{rank}.pt"))
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_gloo_ranks_draw_the_same_orders(tmp_path):
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_distributed_worker, args=(port, str(tmp_path)), nprocs=2, join=True)
    results = [torch.load(tmp_path / f"result{rank}.pt") for rank in range(2)]
    assert results[0]["seed"] == results[1]["seed"] == 100
    assert torch.equal(results[0]["params"], results[1]["params"])
