"""Small builders shared by the tests (not a test module)."""

from __future__ import annotations

import gymnasium
import pytest
import torch
from skrl.memories.torch import RandomMemory

from skrl_marl_ext import IPPO, MADDPG, MAPPO, joint_action_space
from skrl_marl_ext.envs import make_spread_env
from skrl_marl_ext.models import QMLP, CategoricalMLP, DeterministicMLP, GaussianMLP, ValueMLP
from skrl_marl_ext.trainers import interact

QUIET = {"write_interval": 0, "checkpoint_interval": 0}


def make_models(env, algo="mappo", shared=False, hidden=(32, 32), **policy_kwargs):
    """Per-agent (or one shared) policy/value models for ``env``."""

    def build(uid):
        space = env.action_space(uid)
        if hasattr(space, "n"):
            policy = CategoricalMLP(
                observation_space=env.observation_space(uid), action_space=space, hidden_sizes=hidden, **policy_kwargs
            )
        else:
            policy = GaussianMLP(
                observation_space=env.observation_space(uid), action_space=space, hidden_sizes=hidden, **policy_kwargs
            )
        value = ValueMLP(
            observation_space=env.observation_space(uid),
            state_space=env.state_space(uid),
            input="states" if algo == "mappo" else "observations",
            hidden_sizes=hidden,
        )
        return {"policy": policy, "value": value}

    if shared:
        models = build(env.possible_agents[0])
        return {uid: models for uid in env.possible_agents}
    return {uid: build(uid) for uid in env.possible_agents}


def make_agent(env, algo="mappo", shared=False, cfg=None, models=None, **kwargs):
    cls = MAPPO if algo == "mappo" else IPPO
    if cfg is None or isinstance(cfg, dict):
        cfg = dict(cfg or {})
        cfg.setdefault("experiment", QUIET)
    return cls(
        possible_agents=env.possible_agents,
        models=models if models is not None else make_models(env, algo, shared),
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces,
        action_spaces=env.action_spaces,
        device=env.device,
        cfg=cfg,
        **kwargs,
    )


def make_maddpg_models(env, *, shared=False, team=False, hidden=(16,), joint=None, twin=False, env_states=True):
    """Per-agent (or shared) policy, target policy, critic and target critic (and with ``twin`` the second critic and
    its target); critics sized for the joint action (or ``joint``) and the env's state (without ``env_states``: every
    agent's observation concatenated); with ``team`` every agent given the first agent's critics (a team critic)."""
    joint = joint or joint_action_space(env.action_spaces, env.possible_agents)
    critic_state_space = None
    if not env_states:
        size = sum(env.observation_space(u).shape[0] for u in env.possible_agents)
        critic_state_space = gymnasium.spaces.Box(-float("inf"), float("inf"), (size,))

    def build(uid):
        cls = CategoricalMLP if hasattr(env.action_space(uid), "n") else DeterministicMLP

        def policy():
            return cls(
                observation_space=env.observation_space(uid), action_space=env.action_space(uid), hidden_sizes=hidden
            )

        def critic():
            return QMLP(state_space=critic_state_space or env.state_space(uid), action_space=joint, hidden_sizes=hidden)

        models = {"policy": policy(), "target_policy": policy(), "critic": critic(), "target_critic": critic()}
        if twin:
            models.update(critic_2=critic(), target_critic_2=critic())
        return models

    if shared:
        models = build(env.possible_agents[0])
        return {uid: models for uid in env.possible_agents}
    models = {uid: build(uid) for uid in env.possible_agents}
    if team:
        critics = {r: m for r, m in models[env.possible_agents[0]].items() if "critic" in r}
        models = {uid: {**own, **critics} for uid, own in models.items()}
    return models


def make_maddpg(env, cfg=None, *, models=None, memories=None, memory_size=100, env_states=True, **model_kwargs):
    """The MADDPG builder of every test: quiet unless ``cfg["experiment"]`` says otherwise, the models of
    :func:`make_maddpg_models` (``model_kwargs``: ``shared``, ``team``, ``hidden``, ``twin``, ``joint``) and a ``RandomMemory`` of
    ``memory_size`` rows per agent unless given; without ``env_states`` no state spaces (the critics read every agent's
    observation concatenated)."""
    cfg = dict(cfg or {})
    cfg.setdefault("experiment", QUIET)
    if memories is None:
        memories = {uid: RandomMemory(memory_size=memory_size, num_envs=env.num_envs) for uid in env.possible_agents}
    return MADDPG(
        possible_agents=env.possible_agents,
        models=models if models is not None else make_maddpg_models(env, env_states=env_states, **model_kwargs),
        memories=memories,
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces if env_states else None,
        action_spaces=env.action_spaces,
        device=env.device,
        cfg=cfg,
    )


def spread(num_envs=8, num_agents=3, **kwargs):
    return make_spread_env(num_envs=num_envs, num_agents=num_agents, **kwargs)


def params(module):
    return torch.cat([p.detach().reshape(-1).clone() for p in module.parameters()])


def drive(agent, env, steps, *, infos_fn=None, training=True):
    """Run ``steps`` env steps through the agent's lifecycle (what skrl's trainers do), with our one step loop.

    :param infos_fn: ``infos_fn(t, infos_copy)`` returns the infos the agent records at step ``t``.
    :param training: The agent's mode; its own ``post_interaction`` runs either way (it learns only in training).
    """
    agent.init()
    agent.enable_training_mode(training)
    obs, _ = env.reset()
    states = env.state()
    rewrite = None if infos_fn is None else (lambda t, infos: infos_fn(t, dict(infos)))
    for t in range(steps):
        step = interact(agent, env, obs, states, timestep=t, timesteps=steps, infos_fn=rewrite)
        obs, states = step.next_observations, step.next_states
    return agent


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Run a module's tests with one torch thread (import it into a test module to use it).

    Their envs and models are small, and on a busy 2-core machine a second intra-op thread mostly spin-waits: the env
    and CLI tests ran several times slower with two.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def lockstep(batched, loop, env, steps, *, rollouts, infos_fn=None, check=None):
    """Drive a batched agent and a one-by-one agent (or a second batched agent) on one env with the batched agent's actions (``infos_fn(t,
    infos)`` rewrites a step's infos); at each step the loop's rollout is overwritten with the batched agent's (what
    each sampled differs; the update is what is compared), after ``check(name, loop's, batched's)`` saw each stored
    tensor. Yields after every update (every ``rollouts`` steps)."""
    for agent in (batched, loop):
        agent.init()
        agent.enable_training_mode(True)
    obs, _ = env.reset()
    states = env.state()
    (source,) = batched.groups
    for t in range(steps):
        with torch.no_grad():
            actions, _ = batched.act(obs, states, timestep=t, timesteps=steps)
            loop.act(obs, states, timestep=t, timesteps=steps)
            next_obs, rewards, terminated, truncated, infos = env.step(actions)
            next_states = env.state()
        if infos_fn is not None:
            infos = infos_fn(t, dict(infos))
        step = dict(observations=obs, states=states, actions=actions, rewards=rewards, next_observations=next_obs)
        step.update(next_states=next_states, terminated=terminated, truncated=truncated, infos=infos)
        for agent in (batched, loop):
            agent.record_transition(**step, timestep=t, timesteps=steps)
        for i, group in enumerate(loop.groups):
            for name, tensor in source.rollout.tensors.items():
                own = tensor[t % rollouts]
                if group.size < source.size and tensor.shape[1] == source.size:  # agent i's own rows
                    own = own[i : i + 1]
                mine = group.rollout.tensors[name][t % rollouts]
                if check is not None:
                    check(name, mine, own)
                mine.copy_(own)
        for agent in (batched, loop):
            agent.post_interaction(timestep=t, timesteps=steps)
        obs, states = next_obs, next_states
        if (t + 1) % rollouts == 0:
            yield


def checkpoint(agent, uid):
    """Agent ``uid``'s checkpoint entries as ``save()`` writes them: every tensor, and the rest (learning rates,
    scheduler state, step counts as numbers)."""
    tensors, rest = [], []

    def walk(value):
        if torch.is_tensor(value):
            if value.dim() == 0:
                rest.append(float(value))
            else:
                tensors.append(value.detach().float())
        elif isinstance(value, dict):
            for key, item in value.items():
                rest.append(key)
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)
        else:
            rest.append(value)

    for name in sorted(agent.checkpoint_modules[uid]):
        if name != "scaler":
            walk(agent.checkpoint_modules[uid][name].state_dict())
    return tensors, rest


def assert_same_checkpoints(a, b, env, *, atol=1e-6):
    for uid in env.possible_agents:
        (x, x_rest), (y, y_rest) = checkpoint(a, uid), checkpoint(b, uid)
        assert len(x) == len(y) and all(torch.allclose(u, v, rtol=0, atol=atol) for u, v in zip(x, y, strict=True)), uid
        assert len(x_rest) == len(y_rest), uid
        for u, v in zip(x_rest, y_rest, strict=True):  # learning rates, scheduler state, step counts
            assert u == pytest.approx(v, rel=1e-9, abs=0) if isinstance(u, float) else u == v, (uid, u, v)


def state_of(agent, env):
    """Every tensor of every agent's checkpoint entries (models, optimiser moments), in a fixed order."""
    tensors = []
    for uid in env.possible_agents:
        for module in agent.checkpoint_modules[uid].values():
            state = module.state_dict()
            if "state" in state and "param_groups" in state:  # an optimiser: its moments
                state = {f"{k}.{n}": v for k, s in state["state"].items() for n, v in s.items()}
            tensors += [v.float() for v in state.values() if torch.is_tensor(v)]
    return tensors


def max_difference(a, b):
    """The largest elementwise difference between two equally long lists of tensors (as :func:`state_of` gives)."""
    assert len(a) == len(b)
    return max((x - y).abs().max().item() for x, y in zip(a, b, strict=True))
