"""An env whose inputs change shape or dtype mid-run (or contradict the agent's spaces at the first step) is refused
with a ValueError naming the agent class, the input, the expected and the received shape or dtype, the timestep and
the fix, for MAPPO, IPPO and MADDPG and every kind of group; the same env without the change trains."""

from __future__ import annotations

import pytest
import torch
from helpers import QUIET, make_agent, make_maddpg, make_maddpg_models, make_models, one_thread, params, spread
from skrl.trainers.torch import SequentialTrainer

from skrl_marl_ext.trainers import interact

assert one_thread  # the fixture, used by every test of the module

NUM_ENVS, AT = 4, 5
TRAINER = {"headless": True, "disable_progressbar": True}


class ChangingEnv:
    """A skrl multi-agent env whose outputs ``change(name, {agent: tensor})`` rewrites from env step ``at`` on
    (``name``: observations, rewards, terminated, truncated, states); ``at=0`` rewrites the reset's too."""

    def __init__(self, env, change=None, *, at=AT):
        self._env, self.change, self.at, self.steps = env, change, at, 0

    def __getattr__(self, name):
        return getattr(self._env, name)

    def _apply(self, name, tensors, active):
        return self.change(name, tensors) if self.change is not None and active else tensors

    def reset(self, *args, **kwargs):
        observations, infos = self._env.reset(*args, **kwargs)
        return self._apply("observations", observations, self.at == 0), infos

    def step(self, actions):
        absent = {uid: torch.zeros(self.num_envs, 2) for uid in self.possible_agents if uid not in actions}
        observations, rewards, terminated, truncated, infos = self._env.step({**actions, **absent})
        active = self.steps >= self.at
        self.steps += 1
        outputs = {"observations": observations, "rewards": rewards, "terminated": terminated, "truncated": truncated}
        return (*(self._apply(name, x, active) for name, x in outputs.items()), infos)

    def state(self):
        # state() follows step(): after env step ``at`` (or at the reset when at=0) it gives the changed state
        return self._apply("states", self._env.state(), self.steps > self.at or self.at == 0)


def only(name, fn, agents=None):
    """A change that applies ``fn`` to the tensors of input ``name`` (of ``agents``, default all), one tensor per
    distinct input tensor (a shared state stays shared)."""

    def change(what, tensors):
        if what != name:
            return tensors
        done = {}
        return {
            uid: (done.setdefault(id(x), fn(x)) if agents is None or uid in agents else x) for uid, x in tensors.items()
        }

    return change


def fewer_envs(what, tensors):
    return {uid: x[: NUM_ENVS - 1] for uid, x in tensors.items()}


# name: (change, the message's input, received, expected)
CHANGES = {
    "observation loses a column": (
        only("observations", lambda x: x[:, :-1], agents={"agent_1"}),
        "next_observations['agent_1']",
        "(4, 7)",
        "(4, 8)",
    ),
    "state gains a column": (
        only("states", lambda x: torch.cat([x, x[:, :1]], dim=1)),
        "next_states['agent_0']",
        "(4, 13)",
        "(4, 12)",
    ),
    "reward of two columns": (only("rewards", lambda x: x.expand(-1, 2)), "rewards['agent_0']", "(4, 2)", "(4, 1)"),
    "terminated becomes int": (
        only("terminated", lambda x: x.long()),
        "terminated['agent_0']",
        "torch.int64",
        "torch.bool",
    ),
    "num_envs changes": (fewer_envs, "next_observations['agent_0']", "(3, 8)", "(4, 8)"),
    "observations become float64": (
        only("observations", lambda x: x.double()),
        "next_observations['agent_0']",
        "torch.float64",
        "torch.float32",
    ),
}

ALGOS = {"mappo": "MAPPO", "ippo": "IPPO", "maddpg": "MADDPG"}
GROUPS = ("batched", "shared", "one-by-one")


def build(algo, env, group="batched", cfg=None):
    """An agent whose agents form one batched group (per-agent models), one shared-model group, or groups of one
    (``batch_agent_models=False``)."""
    cfg = {"experiment": QUIET, **(cfg or {})}
    if group != "shared":
        cfg["batch_agent_models"] = group == "batched"
    if algo == "maddpg":
        cfg.setdefault("batch_size", 8)
        cfg.setdefault("learning_starts", 2)
        return make_maddpg(env, models=make_maddpg_models(env, shared=group == "shared"), cfg=cfg)
    cfg.setdefault("rollouts", 4)
    cfg.setdefault("mini_batches", 2)
    return make_agent(env, algo, cfg=cfg, models=make_models(env, algo, shared=group == "shared", hidden=(16,)))


def expected_groups(agent, group):
    sizes = [len(g.uids) for g in agent.groups]
    batched = [g.batched for g in agent.groups]
    if group == "one-by-one":
        return sizes == [1, 1, 1]
    return sizes == [3] and batched == [group == "batched"]


def train(agent, env, timesteps=AT + 3):
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": timesteps, **TRAINER}).train()


def assert_names_it(error, algo, what, received, expected, timestep=AT):
    message = str(error.value)
    for part in (f"{ALGOS[algo]}:", what, received, expected, f"timestep {timestep}", "the env must give every step"):
        assert part in message, f"{part!r} not in: {message}"


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("name", CHANGES)
def test_a_changed_input_is_named(algo, name):
    change, what, received, expected = CHANGES[name]
    env = ChangingEnv(spread(num_envs=NUM_ENVS), change)
    agent = build(algo, env)
    with pytest.raises(ValueError) as error:
        train(agent, env)
    assert_names_it(error, algo, what, received, expected)


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("group", GROUPS)
def test_every_kind_of_group_gets_the_named_error(algo, group):
    env = ChangingEnv(spread(num_envs=NUM_ENVS), CHANGES["observation loses a column"][0])
    agent = build(algo, env, group)
    assert expected_groups(agent, group)
    with pytest.raises(ValueError) as error:
        train(agent, env)
    assert_names_it(error, algo, *CHANGES["observation loses a column"][1:])


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("group", GROUPS)
def test_the_env_without_the_change_trains(algo, group):
    env = ChangingEnv(spread(num_envs=NUM_ENVS))
    agent = build(algo, env, group)
    policies = [agent.models[uid]["policy"] for uid in env.possible_agents]
    before = torch.cat([params(p) for p in policies])
    train(agent, env, timesteps=12)
    after = torch.cat([params(p) for p in policies])
    assert torch.isfinite(after).all()
    assert not torch.equal(before, after)


@pytest.mark.parametrize("algo", ALGOS)
def test_a_first_step_that_contradicts_the_spaces_is_named(algo):
    env = ChangingEnv(spread(num_envs=NUM_ENVS), CHANGES["observation loses a column"][0], at=0)
    with pytest.raises(ValueError) as error:
        train(build(algo, env), env)
    message = str(error.value)
    assert f"{ALGOS[algo]}: observations['agent_1'] has shape (4, 7) at timestep 0" in message
    assert "observation_spaces['agent_1'] (Box(" in message and "needs (num_envs, 8)" in message

    env = ChangingEnv(spread(num_envs=NUM_ENVS), CHANGES["reward of two columns"][0], at=0)
    with pytest.raises(ValueError, match=r"rewards\['agent_0'\] has shape \(4, 2\) at timestep 0, expected "):
        train(build(algo, env), env)


@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")  # torch's stack(out=)
@pytest.mark.parametrize("algo", ALGOS)
def test_what_works_today_still_trains(algo):
    # rewards (num_envs,) and integer flags from the first step on: accepted as before
    def change(what, tensors):
        if what == "rewards":
            return {uid: x.view(-1) for uid, x in tensors.items()}
        if what in ("terminated", "truncated"):
            return {uid: x.int() for uid, x in tensors.items()}
        return tensors

    env = ChangingEnv(spread(num_envs=NUM_ENVS), change, at=0)
    agent = build(algo, env)
    before = params(agent.models["agent_0"]["policy"])
    train(agent, env, timesteps=12)
    assert not torch.equal(before, params(agent.models["agent_0"]["policy"]))


@pytest.mark.parametrize("algo", ALGOS)
def test_evaluation_on_another_env_starts_afresh(algo):
    """The shapes of training do not bind evaluation on an env of fewer envs (its actions have its shape), nor the
    evaluation's a later training on the first env (which goes on learning)."""
    env = spread(num_envs=NUM_ENVS)
    agent = build(algo, env)
    train(agent, env)
    small = spread(num_envs=2)
    SequentialTrainer(env=small, agents=agent, cfg={"timesteps": 3, **TRAINER}).eval()
    observations, _ = small.reset()
    actions, _ = agent.act(observations, small.state(), timestep=0, timesteps=1)
    assert {uid: a.shape[0] for uid, a in actions.items()} == dict.fromkeys(small.possible_agents, 2)
    before = params(agent.models["agent_0"]["policy"])
    train(agent, env, timesteps=12)
    assert not torch.equal(before, params(agent.models["agent_0"]["policy"]))


@pytest.mark.parametrize("algo", ALGOS)
def test_actions_handed_to_record_transition_are_checked(algo):
    env = spread(num_envs=NUM_ENVS)
    agent = build(algo, env)
    agent.init()
    agent.enable_training_mode(True)
    observations, _ = env.reset()
    states = env.state()
    for t in range(AT):
        step = interact(agent, env, observations, states, timestep=t, timesteps=10)
        observations, states = step.next_observations, step.next_states
    actions, _ = agent.act(observations, states, timestep=AT, timesteps=10)
    next_observations, rewards, terminated, truncated, infos = env.step(actions)
    actions = {**actions, "agent_2": actions["agent_2"][:, :1]}
    with pytest.raises(ValueError) as error:
        agent.record_transition(
            observations=observations,
            states=states,
            actions=actions,
            rewards=rewards,
            next_observations=next_observations,
            next_states=env.state(),
            terminated=terminated,
            truncated=truncated,
            infos=infos,
            timestep=AT,
            timesteps=10,
        )
    message = str(error.value)
    assert f"{ALGOS[algo]}: actions['agent_2'] has shape (4, 1) at timestep {AT}, expected (4, 2)" in message
    assert "record_transition must get the actions act returned" in message


@pytest.mark.parametrize("algo", ["mappo", "maddpg"])
@pytest.mark.parametrize("width", [8, 7], ids=["right-width", "wrong-width"])
def test_an_agent_absent_at_first_is_checked_when_it_comes(algo, width):
    # agent_2 is absent from the observations of the reset and of the first two steps, then comes with ``width``
    env = ChangingEnv(spread(num_envs=NUM_ENVS), at=0)

    def change(what, tensors):
        if what != "observations":
            return tensors
        if env.steps < 3:
            return {uid: x for uid, x in tensors.items() if uid != "agent_2"}
        return {**tensors, "agent_2": tensors["agent_2"][:, :width]}

    env.change = change
    agent = build(algo, env)
    if width == 8:
        train(agent, env)
        return
    with pytest.raises(ValueError, match=r"next_observations\['agent_2'\] has shape \(4, 7\) at timestep 2 but "):
        train(agent, env)
