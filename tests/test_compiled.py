"""The compiled path (``cfg.compile``): what it computes equals eager to 1e-6 on a CPU, acting and training, for a
batched group, agents one by one and a shared model; after the first rollout and update it compiles nothing more; its
checkpoints are eager's; a wrong value is refused by name."""

from __future__ import annotations

import contextlib
import copy

import helpers
import pytest
import torch
from helpers import QUIET, make_models, max_difference, one_thread, params, spread  # noqa: F401
from skrl.resources.preprocessors.torch import RunningStandardScaler
from skrl.resources.schedulers.torch import KLAdaptiveLR
from skrl.trainers.torch import SequentialTrainer

from skrl_marl_ext import HAPPO, ValueNorm

ROLLOUTS = 4
CFG = {"rollouts": ROLLOUTS, "learning_epochs": 2, "mini_batches": 3, "experiment": QUIET}
"""Tiny: 4 envs x 4 steps make 16 samples per agent, in mini-batches of 6, 5 and 5 (the last two of another size)."""
KINDS = {
    "batched": {"shared": False, "batch_agent_models": True},
    "one by one": {"shared": False, "batch_agent_models": False},
    "shared model": {"shared": True, "batch_agent_models": False},
}


def twins(env, *, algo="mappo", kind="batched", cfg=None, hidden=(8,)):
    """An eager agent and a compiled one with the same models (copies) and config."""
    torch.manual_seed(0)
    shared, batch = KINDS[kind]["shared"], KINDS[kind]["batch_agent_models"]
    models = make_models(env, algo, shared, hidden=hidden)
    copies = copy.deepcopy(models)  # before a batched group makes the models views of its stack
    cfg = {**CFG, "batch_agent_models": batch, **(cfg or {})}
    eager = helpers.make_agent(env, algo, cfg=cfg, models=models)
    compiled = helpers.make_agent(env, algo, cfg={**cfg, "compile": True}, models=copies)
    assert [g.batched for g in eager.groups] == [g.batched for g in compiled.groups]
    return eager, compiled


def model_params(agent):
    return [params(agent.models[uid][role]) for uid in agent.possible_agents for role in ("policy", "value")]


def step_together(eager, compiled, env, steps):
    """Drive both agents on one env: each acts on the same observations with the same random draws (the generator
    seeded alike before each call that draws), the env steps with the eager agent's actions and both record that
    step and update. Yields each step's ``(actions, outputs)`` of both, after the step's ``post_interaction``."""
    for agent in (eager, compiled):
        agent.init()
        agent.enable_training_mode(True)
    obs, _ = env.reset()
    states = env.state()
    for t in range(steps):
        acted = []
        for agent in (eager, compiled):
            torch.manual_seed(t)
            acted.append(agent.act(obs, states, timestep=t, timesteps=steps))
        next_obs, rewards, terminated, truncated, infos = env.step(acted[0][0])
        step = dict(observations=obs, states=states, actions=acted[0][0], rewards=rewards, next_observations=next_obs)
        step.update(next_states=env.state(), terminated=terminated, truncated=truncated, infos=infos)
        for agent in (eager, compiled):
            agent.record_transition(**step, timestep=t, timesteps=steps)
            torch.manual_seed(steps + t)  # the update's mini-batch order
            agent.post_interaction(timestep=t, timesteps=steps)
        obs, states = next_obs, step["next_states"]
        yield acted


def same_acting(eager_acted, compiled_acted):
    """Every agent's action, log-probability and mean action agree to 1e-6."""
    (actions, outputs), (their_actions, their_outputs) = eager_acted, compiled_acted
    for uid, action in actions.items():
        assert max_difference([action], [their_actions[uid]]) < 1e-6, uid
        for key in ("log_prob", "mean_actions"):
            assert max_difference([outputs[uid][key]], [their_outputs[uid][key]]) < 1e-6, (uid, key)


def train_and_compare(eager, compiled, env, rollouts):
    """Train both ``rollouts`` rollouts on one env (:func:`step_together`), acting compared at every step and the
    models after every update; after its first update the compiled agent compiles nothing (torch's stance
    ``fail_on_recompile`` raises where it would). Then evaluation acting."""
    before = model_params(eager)
    with contextlib.ExitStack() as after_first_update:
        for t, acted in enumerate(step_together(eager, compiled, env, rollouts * ROLLOUTS)):
            same_acting(*acted)
            if (t + 1) % ROLLOUTS == 0:
                assert max_difference(model_params(eager), model_params(compiled)) < 1e-6
            if t + 1 == ROLLOUTS:
                after_first_update.enter_context(torch.compiler.set_stance("fail_on_recompile"))
    assert max_difference(model_params(eager), before) > 1e-3  # it learned: the comparison compares something
    obs, _ = env.reset()
    for agent in (eager, compiled):
        agent.enable_training_mode(False)
    with torch.no_grad():
        (_, outputs), (_, theirs) = (
            agent.act(obs, env.state(), timestep=0, timesteps=1) for agent in (eager, compiled)
        )
    for uid in env.possible_agents:
        assert max_difference([outputs["mean_actions"][uid]], [theirs["mean_actions"][uid]]) < 1e-6, uid


def test_a_batched_group_compiled_acts_and_trains_as_eager():
    """The batched group's one ``torch.vmap`` over stacked parameters, compiled, with a last mini-batch of another
    size: equal to eager at every step and after every update, and no compilation after the first update."""
    env = spread(num_envs=4, num_agents=3)
    eager, compiled = twins(env, kind="batched")
    assert compiled.groups[0].batched
    train_and_compare(eager, compiled, env, rollouts=3)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["one by one", "shared model"])
def test_other_groups_compiled_act_and_train_as_eager(kind):
    env = spread(num_envs=4, num_agents=3)
    eager, compiled = twins(env, kind=kind)
    train_and_compare(eager, compiled, env, rollouts=3)


@pytest.mark.slow
def test_compiled_ippo_with_every_loss_term_and_statistic_equals_eager():
    """IPPO with input and value statistics, value clipping, Huber, entropy, time-limit bootstrap, KL early stop and a
    KL-adaptive learning rate, batched, its update in passes of 2 agents and 1: the compiled loss takes each of its
    branches as eager does."""
    env = spread(num_envs=4, num_agents=3, episode_length=3)
    cfg = {
        "observation_preprocessor": RunningStandardScaler,
        "value_preprocessor": ValueNorm,
        "value_clip": 0.2,
        "huber_delta": 1.0,
        "entropy_loss_scale": 0.01,
        "time_limit_bootstrap": True,
        "kl_threshold": 0.05,
        "learning_rate_scheduler": KLAdaptiveLR,
        "update_agents_at_once": 2,
    }
    eager, compiled = twins(env, algo="ippo", cfg=cfg)
    train_and_compare(eager, compiled, env, rollouts=3)


@pytest.mark.slow
def test_compiled_training_through_skrls_trainer_equals_eager():
    """skrl's ``SequentialTrainer`` trains each from the same seed: the same models after 3 rollouts."""
    trained = []
    for compile in (False, True):
        env = spread(num_envs=4, num_agents=3, seed=0)
        torch.manual_seed(0)
        models = make_models(env, hidden=(8,))
        agent = helpers.make_agent(env, cfg={**CFG, "batch_agent_models": True, "compile": compile}, models=models)
        before = model_params(agent)
        cfg = {"timesteps": 3 * ROLLOUTS, "headless": True, "disable_progressbar": True}
        SequentialTrainer(env=env, agents=agent, cfg=cfg).train()
        trained.append(model_params(agent))
    assert max_difference(*trained) < 1e-6
    assert max_difference(trained[0], before) > 1e-3  # it learned


@pytest.mark.slow
def test_compiled_happo_equals_eager():
    """HAPPO's sequential update (each agent's advantages weighted by the ratios of those updated before) and its team
    critic's compiled ``value_loss``."""
    env = spread(num_envs=4, num_agents=3)
    torch.manual_seed(0)
    models = make_models(env, hidden=(8,))
    critic = models["agent_0"]["value"]
    for uid in env.possible_agents:  # one team critic
        models[uid]["value"] = critic
    agents = []
    for compile, own in ((False, models), (True, copy.deepcopy(models))):  # HAPPO does not batch: no views
        agents.append(
            HAPPO(
                possible_agents=env.possible_agents,
                models=own,
                observation_spaces=env.observation_spaces,
                state_spaces=env.state_spaces,
                action_spaces=env.action_spaces,
                device=env.device,
                cfg={**CFG, "compile": compile},
            )
        )
    train_and_compare(*agents, env, rollouts=3)


def test_a_compiled_agent_writes_and_loads_eager_checkpoints(tmp_path):
    """The compiled path compiles functions, not modules: a compiled agent's checkpoint has eager's keys and tensors
    after the same training, and an eager checkpoint loads into it."""
    env = spread(num_envs=4, num_agents=3)
    eager, compiled = twins(env, kind="batched", cfg={"learning_epochs": 1, "mini_batches": 1})
    for _ in step_together(eager, compiled, env, ROLLOUTS):
        pass
    files = {}
    for name, agent in (("eager", eager), ("compiled", compiled)):
        files[name] = tmp_path / f"{name}.pt"
        agent.save(str(files[name]))
    saved = {name: torch.load(path, weights_only=False) for name, path in files.items()}

    def flat(tree, prefix=""):
        if isinstance(tree, dict):
            return {k: v for key, sub in tree.items() for k, v in flat(sub, f"{prefix}{key}/").items()}
        return {prefix: tree}

    mine, theirs = flat(saved["compiled"]), flat(saved["eager"])
    assert mine.keys() == theirs.keys()
    assert not [key for key in mine if "_orig_mod" in key]
    tensors = [key for key, value in mine.items() if torch.is_tensor(value) and value.is_floating_point()]
    assert tensors and max_difference([mine[k] for k in tensors], [theirs[k] for k in tensors]) < 1e-6

    with torch.no_grad():
        for p in compiled.models["agent_0"]["policy"].parameters():
            p.add_(1.0)
    compiled.load(str(files["eager"]))
    assert max_difference(model_params(compiled), model_params(eager)) == 0.0


@pytest.mark.parametrize(
    "value, expected",
    [
        ("yes", "cfg.compile must be False, True or a dict"),
        ({"modes": "max-autotune"}, r"cfg.compile must be .*'mode'"),
        (1, "cfg.compile must be False, True or a dict"),
    ],
)
def test_a_wrong_compile_value_is_refused_by_name(value, expected):
    env = spread(num_envs=2, num_agents=2)
    with pytest.raises(ValueError, match=expected):
        helpers.make_agent(env, cfg={"compile": value})
