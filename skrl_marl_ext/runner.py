"""skrl's YAML ``Runner``, resolving ``agent: class: MAPPO|IPPO|HAPPO|MADDPG|MASAC|HASAC`` to this package's agents.

skrl's :class:`skrl.utils.runner.torch.Runner` maps class names to classes through a hard-coded table, so a YAML
file written for skrl (an Isaac Lab ``skrl_mappo_cfg.yaml``, say, 1.x key names included) always builds skrl's own
MAPPO. :class:`Runner` is that Runner with the multi-agent entries pointing here. Everything else (model
instantiators, ``RandomMemory``, ``SequentialTrainer``, the 1.x key mapping) is skrl's, with two differences:

- **A config never runs code.** skrl's Runner ``eval()``s the strings of its class-valued fields and its instantiators
  ``exec`` source built from a model's ``network``/``output``; here class names resolve from tables
  (:data:`MODELS`, :data:`skrl_marl_ext.checks.configs.CLASSES`) and networks are allowed only when made of skrl's
  documented tokens (:mod:`skrl_marl_ext.checks.configs`). ``exploration_scheduler`` expressions are refused.
- **Every value is checked by name** against the field or argument it sets (the agent's config dataclass, the model's,
  memory's and trainer's signatures) before anything is built: one-line ``ValueError`` naming the field, the type
  expected and the value received; ``1e-3`` read by YAML as a string is the number it means.

Additions, all optional in the YAML:

- Model classes ``PolicyMLP`` (for MAPPO/IPPO a Gaussian policy for Box actions; for MADDPG a deterministic one; for
  MASAC/HASAC a squashed Gaussian one; a masked categorical policy for Discrete actions in all), ``GaussianMLP``, ``CategoricalMLP``, ``ValueMLP``,
  ``DeterministicMLP`` and ``QMLP`` from :mod:`skrl_marl_ext.models`, besides skrl's ``GaussianMixin``/
  ``DeterministicMixin``/... instantiators. Their other keys are the classes' arguments.
- Recurrent models for MAPPO/IPPO: ``PolicyRNN`` (``GaussianRNN`` for Box actions, ``CategoricalRNN`` for Discrete),
  ``GaussianRNN``, ``CategoricalRNN`` and ``ValueRNN``, with ``cell: gru|lstm``, ``hidden_size``, ``num_layers`` and
  ``sequence_length`` (``agent: rollouts`` must be a multiple of it).
- ``value_preprocessor: ValueNorm`` (the MAPPO paper's value normaliser, :class:`~skrl_marl_ext.ValueNorm`), resolved
  beside skrl's ``RunningStandardScaler``.
- ``models: share_across_agents: true``: agents with equal observation, state and action spaces get the *same* model
  objects (parameter sharing), which this package's agents train as one batch.
- ``models: team_critic: true`` (HAPPO): every agent gets the *same* value model object, each its own policy: HARL's
  one critic for the team (:class:`~skrl_marl_ext.HAPPO`, "A team critic"). The agents' state spaces must be equal.
- MADDPG: the ``critic`` (and ``target_critic``) models are built with ``state_space`` the env's state space (the
  agents' observations concatenated when the env has none) and ``action_space`` the joint action space
  (:func:`~skrl_marl_ext.models.joint_action_space`), so skrl's instantiators size ``concatenate([STATES,
  ACTIONS])`` right (``ACTIONS`` is ``inputs["taken_actions"]``). ``target_policy``/``target_critic`` sections may be left out: they copy ``policy``/
  ``critic``. A ``critic_2`` section (``target_critic_2`` copies it when left out) adds TD3's second critic to every
  agent, built as the first (clipped double Q; ``configs/maddpg.yaml``, the CLI's default, has one; ``critic_2: null``
  leaves it out). ``models: team_critic: true`` gives every agent the first agent's critic models, each agent its
  own policy: one team critic (HARL's MADDPG). ``memory: memory_size`` must be given (rows per env).
  ``exploration_noise: GaussianNoise`` with ``exploration_noise_kwargs`` (skrl 2.x DDPG keys) becomes the noise
  instance MADDPG takes.
- MASAC and HASAC: the models as MADDPG's without ``target_policy``; ``critic_2`` (twin soft critics) is built as
  ``critic`` when its section is left out. ``models: team_critic: true`` gives every agent the first agent's four
  critic models, each agent its own policy: one team critic (HARL's). ``memory: memory_size`` must be given.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import gymnasium
import numpy as np
from skrl import logger
from skrl.envs.wrappers.torch import MultiAgentEnvWrapper
from skrl.utils.model_instantiators.torch import (
    categorical_model,
    deterministic_model,
    gaussian_model,
    multicategorical_model,
    multivariate_gaussian_model,
)
from skrl.utils.runner.torch import Runner as SkrlRunner
from skrl.utils.spaces.torch import compute_space_size

from skrl_marl_ext.algorithms import HAPPO, HAPPO_CFG, IPPO, IPPO_CFG, MAPPO, MAPPO_CFG
from skrl_marl_ext.checks.configs import EXPLORATION_SCHEDULER, check_config, resolve_classes
from skrl_marl_ext.models import (
    QMLP,
    CategoricalMLP,
    CategoricalRNN,
    DeterministicMLP,
    GaussianMLP,
    GaussianRNN,
    SquashedGaussianMLP,
    ValueMLP,
    ValueRNN,
    joint_action_space,
)
from skrl_marl_ext.models.mlp import _ACTIVATIONS

ALGORITHM_NAMES = ("mappo", "ippo", "maddpg", "happo", "masac", "hasac")
"""Our agents by lower-case name, as ``agent: class:`` and ``skrl-marl train --algo`` take them."""

CRITIC_ROLES = ("critic", "target_critic", "critic_2", "target_critic_2")
"""MADDPG's, MASAC's and HASAC's roles that read the global state and the joint action."""
OFF_POLICY = ("maddpg", "masac", "hasac")
"""The algorithms with a replay memory and critics of the joint action."""
SAC = ("masac", "hasac")


def load_algorithm(name: str) -> tuple[type, type]:
    """``(agent class, config class)`` of one of :data:`ALGORITHM_NAMES` (the off-policy agents are imported only
    here).

    :raises ValueError: On another name, or when MADDPG cannot be imported (the message says so in one line).
    """
    key = name.lower()
    if key in SAC:
        from skrl_marl_ext.algorithms import HASAC_CFG, MASAC_CFG
        from skrl_marl_ext.algorithms.hasac import HASAC
        from skrl_marl_ext.algorithms.masac import MASAC

        return (MASAC, MASAC_CFG) if key == "masac" else (HASAC, HASAC_CFG)
    if key == "mappo":
        return MAPPO, MAPPO_CFG
    if key == "ippo":
        return IPPO, IPPO_CFG
    if key == "happo":
        return HAPPO, HAPPO_CFG
    if key == "maddpg":
        try:
            from skrl_marl_ext import MADDPG, MADDPG_CFG
        except ImportError:
            try:
                from skrl_marl_ext.algorithms.maddpg import MADDPG
                from skrl_marl_ext.algorithms.maddpg_cfg import MADDPG_CFG
            except ImportError as e:
                raise ValueError(f"MADDPG is not available in this installation of skrl_marl_ext ({e})") from None
        return MADDPG, MADDPG_CFG
    raise ValueError(f"unknown algorithm '{name}'; choose one of {', '.join(ALGORITHM_NAMES)}")


SHARE_KEY = "share_across_agents"
TEAM_CRITIC_KEY = "team_critic"


def _policy(name: str, box: type, discrete: type, action_space, **kwargs):
    """``box(...)`` for Box actions, ``discrete(...)`` for Discrete (the Gaussian-only keys dropped); ``name`` is the
    YAML class name for the error on another action space."""
    if isinstance(action_space, gymnasium.spaces.Box):
        return box(action_space=action_space, **kwargs)
    if isinstance(action_space, gymnasium.spaces.Discrete):
        kwargs.pop("initial_log_std", None)
        kwargs.pop("clip_actions", None)
        return discrete(action_space=action_space, **kwargs)
    raise ValueError(f"{name}: action space {action_space} is neither Box nor Discrete; give a model class")


def policy_mlp(*, action_space, deterministic=False, squashed=False, **kwargs):
    """A :class:`~skrl_marl_ext.models.GaussianMLP` for Box actions, a :class:`CategoricalMLP` for Discrete.

    :param deterministic: Box actions get a :class:`~skrl_marl_ext.models.DeterministicMLP` (MADDPG) instead.
    :param squashed: Box actions get a :class:`~skrl_marl_ext.models.SquashedGaussianMLP` (MASAC, HASAC) instead.

    :param kwargs: Arguments of the chosen class (``initial_log_std`` is dropped for Discrete actions).

    :raises ValueError: On another action space.
    """
    if isinstance(action_space, gymnasium.spaces.Box) and deterministic:
        for key in ("initial_log_std", "clip_actions", "clip_log_std", "min_log_std", "max_log_std"):
            kwargs.pop(key, None)
        return DeterministicMLP(action_space=action_space, **kwargs)
    if isinstance(action_space, gymnasium.spaces.Box) and squashed:
        for key in ("initial_log_std", "clip_actions", "clip_log_std", "min_log_std", "max_log_std"):
            kwargs.pop(key, None)
        return SquashedGaussianMLP(action_space=action_space, **kwargs)
    return _policy("PolicyMLP", GaussianMLP, CategoricalMLP, action_space, **kwargs)


def policy_rnn(*, action_space, **kwargs):
    """A :class:`~skrl_marl_ext.models.GaussianRNN` for Box actions, a :class:`CategoricalRNN` for Discrete (MAPPO
    and IPPO; ``cell`` picks GRU or LSTM).

    :raises ValueError: On another action space.
    """
    return _policy("PolicyRNN", GaussianRNN, CategoricalRNN, action_space, **kwargs)


def deterministic_policy_mlp(**kwargs):
    """:func:`policy_mlp` for MADDPG: a :class:`~skrl_marl_ext.models.DeterministicMLP` for Box actions."""
    return policy_mlp(deterministic=True, **kwargs)


def squashed_policy_mlp(**kwargs):
    """:func:`policy_mlp` for MASAC and HASAC: a :class:`~skrl_marl_ext.models.SquashedGaussianMLP` for Box actions."""
    return policy_mlp(squashed=True, **kwargs)


MODELS: dict[str, tuple[Any, Any]] = {
    "PolicyMLP": (policy_mlp, GaussianMLP),  # Discrete actions take GaussianMLP's arguments less the Gaussian ones
    "GaussianMLP": (GaussianMLP, GaussianMLP),
    "CategoricalMLP": (CategoricalMLP, CategoricalMLP),
    "ValueMLP": (ValueMLP, ValueMLP),
    "DeterministicMLP": (DeterministicMLP, DeterministicMLP),
    "QMLP": (QMLP, QMLP),
    "SquashedGaussianMLP": (SquashedGaussianMLP, SquashedGaussianMLP),
    "PolicyRNN": (policy_rnn, GaussianRNN),
    "GaussianRNN": (GaussianRNN, GaussianRNN),
    "CategoricalRNN": (CategoricalRNN, CategoricalRNN),
    "ValueRNN": (ValueRNN, ValueRNN),
    # skrl's instantiators: the source they generate from network/output is checked first (config_check)
    "GaussianMixin": (gaussian_model, gaussian_model),
    "DeterministicMixin": (deterministic_model, deterministic_model),
    "CategoricalMixin": (categorical_model, categorical_model),
    "MultiCategoricalMixin": (multicategorical_model, multicategorical_model),
    "MultivariateGaussianMixin": (multivariate_gaussian_model, multivariate_gaussian_model),
}
"""The model classes a config may name: ``name -> (what builds it, whose signature lists its arguments)``."""

_MODELS = {name.lower(): build for name, (build, _) in MODELS.items()}


def _scale_rewards(rewards, *args, scale: float, **kwargs):
    """skrl's ``rewards_shaper_scale``: the rewards times ``scale``."""
    return rewards * scale


class Runner(SkrlRunner):
    def __init__(self, env: MultiAgentEnvWrapper, cfg: dict[str, Any], *, verbose: bool = False) -> None:
        """skrl's Runner with this package's agents (:data:`ALGORITHM_NAMES`) resolved to :mod:`skrl_marl_ext` (see the
        module docstring).

        :param env: A skrl multi-agent env wrapper.
        :param cfg: The configuration, as :meth:`load_cfg_from_yaml` reads it.
        :param verbose: Print the models' source (skrl's instantiators only).

        :raises ValueError: If ``cfg`` has no ``agent: class:`` or names an agent this package does not provide, or on
            any key or value the agent, a model, the memory or the trainer does not take (one line naming the field,
            the type expected and the value received; see the module docstring).
        """
        if not isinstance(cfg, dict) or not isinstance(cfg.get("agent"), dict):
            raise ValueError(
                "Runner: cfg must be a Runner config (a dict with an 'agent' section, as load_cfg_from_yaml reads it)"
            )
        name = str(cfg["agent"].get("class", "")).lower()
        if name not in ALGORITHM_NAMES:
            raise ValueError(
                f"Runner: agent.class '{(cfg.get('agent') or {}).get('class')}' is not one of this package's agents; "
                f"use one of {', '.join(n.upper() for n in ALGORITHM_NAMES)} (skrl's own agents: "
                "skrl.utils.runner.torch.Runner)"
            )
        self._algorithm = name
        self._classes = load_algorithm(name)
        super().__init__(env, cfg, verbose=verbose)

    def _check_cfg_compatibility(self, cfg: dict) -> dict:
        """Every key and value checked by name (:func:`~skrl_marl_ext.checks.configs.check_config`, in the config's own
        terms), then skrl's mapping of 1.x keys."""
        agent_class, cfg_class = self._classes
        cfg = check_config(
            cfg,
            owner=agent_class.__name__,
            cfg_class=cfg_class,
            algorithm=self._algorithm,
            models={name: arguments for name, (_, arguments) in MODELS.items()},
            possible_agents=self._env.possible_agents,
            activations=sorted(_ACTIVATIONS),
        )
        return super()._check_cfg_compatibility(cfg)

    def _process_cfg(self, cfg: dict) -> dict:
        """skrl's, without ``eval``: class names resolve from the tables, ``*_kwargs: null`` becomes ``{}``, ``class``
        is dropped and ``rewards_shaper_scale`` becomes a ``rewards_shaper``."""
        cfg = resolve_classes(copy.deepcopy(cfg))
        cfg.pop("class", None)
        if "exploration_scheduler" in cfg:
            raise ValueError(EXPLORATION_SCHEDULER)
        if "rewards_shaper_scale" in cfg:
            scale = cfg.pop("rewards_shaper_scale")
            if scale is not None and scale != 1.0:
                cfg["rewards_shaper"] = functools.partial(_scale_rewards, scale=scale)
        return cfg

    def _component(self, name: str) -> Any:
        key = name.lower()
        if key == self._algorithm:
            return self._classes[0]
        if key == f"{self._algorithm}_cfg":
            return self._classes[1]
        if key in ALGORITHM_NAMES or (key.endswith("_cfg") and key[:-4] in ALGORITHM_NAMES):
            return load_algorithm(key.removesuffix("_cfg"))[key.endswith("_cfg")]
        if key == "policymlp" and self._algorithm == "maddpg":
            return deterministic_policy_mlp
        if key == "policymlp" and self._algorithm in SAC:
            return squashed_policy_mlp
        if key in _MODELS:
            return _MODELS[key]
        return super()._component(name)

    def _generate_models(self, env: MultiAgentEnvWrapper, cfg: dict[str, Any]) -> dict[str, dict[str, Any]]:
        cfg = copy.deepcopy(cfg)
        models_cfg = cfg.setdefault("models", {})
        share = bool(models_cfg.pop(SHARE_KEY, False))
        team_critic = bool(models_cfg.pop(TEAM_CRITIC_KEY, False))
        if team_critic and self._algorithm not in ("happo", *OFF_POLICY):
            raise ValueError(
                f"Runner: models.team_critic is HAPPO's, MADDPG's, MASAC's and HASAC's (one critic for agents with "
                f"policies of "
                f"their own); {self._algorithm.upper()} trains a shared critic only with a shared policy: set "
                "models.share_across_agents: true instead"
            )
        if models_cfg.get("separate") is None:
            models_cfg["separate"] = True
        if self._algorithm in OFF_POLICY:
            models = self._generate_off_policy_models(env, models_cfg)
        else:
            models = super()._generate_models(env, cfg)
        if share:
            models = _share_models(env, models)
        if not team_critic:
            return models
        return _team_critic(env, models, roles=CRITIC_ROLES if self._algorithm in OFF_POLICY else ("value",))

    def _generate_off_policy_models(self, env: MultiAgentEnvWrapper, models_cfg: dict[str, Any]) -> dict[str, dict]:
        """Per agent ``policy`` (MADDPG: and ``target_policy``), ``critic``, ``target_critic``, and ``critic_2``,
        ``target_critic_2`` where a ``critic_2`` section is given (MASAC and HASAC: always; see the module
        docstring)."""
        name, sac = self._algorithm.upper(), self._algorithm in SAC
        if not models_cfg.pop("separate", True):
            raise ValueError(f"Runner: {name} needs separate models (models: separate: True)")
        if sac and models_cfg.get("critic_2") is None and isinstance(models_cfg.get("critic"), dict):
            models_cfg["critic_2"] = models_cfg["critic"]  # twin soft critics: a second one built as the first
        twin = models_cfg.get("critic_2") is not None  # clipped double Q
        for role in ("policy", "critic", *(("critic_2",) if twin else ())):
            if not isinstance(models_cfg.get(role), dict) or not models_cfg[role].get("class"):
                raise ValueError(f"Runner: {name} needs a 'models: {role}:' section with a 'class'")
        roles = {"policy": models_cfg["policy"]}
        if not sac:
            roles["target_policy"] = models_cfg.get("target_policy") or models_cfg["policy"]
        roles.update(critic=models_cfg["critic"], target_critic=models_cfg.get("target_critic") or models_cfg["critic"])
        if twin:
            roles["critic_2"] = models_cfg["critic_2"]
            roles["target_critic_2"] = models_cfg.get("target_critic_2") or models_cfg["critic_2"]
        # a section set to null is left out (the CLI's models.critic_2=null turns MADDPG's default twin critics off)
        unknown = sorted(role for role, section in models_cfg.items() if role not in roles and section is not None)
        if unknown:
            known = (
                ", ".join(roles)
                if sac
                else "policy, target_policy, critic, target_critic (and critic_2, target_critic_2)"
            )
            raise ValueError(f"Runner: {name} models are {known}; got also {unknown}")
        joint = joint_action_space(env.action_spaces, env.possible_agents)
        states = [env.state_spaces.get(uid) for uid in env.possible_agents]
        if all(space is not None for space in states):
            critic_states = dict(zip(env.possible_agents, states, strict=True))
        else:  # MADDPG then feeds its critics every observation concatenated
            size = sum(
                compute_space_size(env.observation_spaces[uid], occupied_size=True) for uid in env.possible_agents
            )
            space = gymnasium.spaces.Box(-np.inf, np.inf, (size,), dtype=np.float32)
            critic_states = {uid: space for uid in env.possible_agents}
        models: dict[str, dict[str, Any]] = {}
        for uid in env.possible_agents:
            models[uid] = {}
            for role, role_cfg in roles.items():
                kwargs = self._process_cfg(copy.deepcopy(role_cfg))  # drops "class"
                critic = role in CRITIC_ROLES
                models[uid][role] = self._component(role_cfg["class"])(
                    observation_space=env.observation_spaces[uid],
                    state_space=critic_states[uid] if critic else env.state_spaces.get(uid),
                    action_space=joint if critic else env.action_spaces[uid],
                    device=env.device,
                    **kwargs,
                )
                models[uid][role].init_state_dict(role=role)
        return models

    def _generate_agent(self, env: MultiAgentEnvWrapper, cfg: dict[str, Any], models: dict[str, dict[str, Any]]):
        if self._algorithm == "happo":
            return self._generate_happo(env, cfg, models)
        if self._algorithm not in OFF_POLICY:
            return super()._generate_agent(env, cfg, models)
        name = self._algorithm.upper()
        memory_cfg = cfg.get("memory") or {}
        if not memory_cfg.get("class"):
            raise ValueError(f"Runner: {name} needs a 'memory:' section with a 'class' (e.g. RandomMemory)")
        if not isinstance(memory_cfg.get("memory_size"), int) or memory_cfg["memory_size"] < 1:
            raise ValueError(
                f"Runner: {name} needs memory.memory_size, the replay memory's rows per env (e.g. 10000), got "
                f"{memory_cfg.get('memory_size')!r}"
            )
        memories = self._memories(env, memory_cfg)
        agent_cfg = self._process_cfg(cfg["agent"])
        for name in ("exploration_noise", "smooth_regularization_noise"):
            noise = agent_cfg.get(name)
            noise_kwargs = agent_cfg.pop(f"{name}_kwargs", {}) or {}
            if isinstance(noise, type):  # skrl 2.x DDPG/TD3 YAML: a class and its kwargs
                agent_cfg[name] = noise(**{"device": env.device, **noise_kwargs})
        return _build_agent(self._classes[0], env, models=models, memories=memories, cfg=agent_cfg)

    def _memories(self, env: MultiAgentEnvWrapper, memory_cfg: dict[str, Any]) -> dict[str, Any]:
        """One memory per agent from the YAML's ``memory:`` section (its ``class`` and keyword arguments)."""
        memory_class = self._component(memory_cfg["class"])
        return {
            uid: memory_class(num_envs=env.num_envs, device=env.device, **self._process_cfg(memory_cfg))
            for uid in env.possible_agents
        }

    def _generate_happo(self, env: MultiAgentEnvWrapper, cfg: dict[str, Any], models: dict[str, dict[str, Any]]):
        """HAPPO as skrl's Runner builds MAPPO (skrl's table has no HAPPO): memories of ``rollouts`` rows when
        ``memory_size`` is -1; the agent sizes the preprocessors from its spaces."""
        memory_cfg = dict(cfg.get("memory") or {"class": "RandomMemory", "memory_size": -1})
        if memory_cfg.get("memory_size", -1) < 0:
            memory_cfg["memory_size"] = cfg["agent"].get("rollouts", HAPPO_CFG.rollouts)
        memories = self._memories(env, memory_cfg)
        agent_cfg = dict(cfg["agent"])
        for name in ("random_timesteps", "learning_starts"):  # ignored with a warning, as skrl does for MAPPO
            if agent_cfg.pop(name, None) is not None:
                logger.warning(f"The '{name}' field in the configuration is not supported by HAPPO; it is ignored")
        return _build_agent(HAPPO, env, models=models, memories=memories, cfg=self._process_cfg(agent_cfg))


def _build_agent(cls: type, env: MultiAgentEnvWrapper, *, models: dict, memories: dict | None, cfg: Any) -> Any:
    """``cls`` over ``env``'s agents and spaces, as skrl's Runner builds its agents."""
    return cls(
        possible_agents=env.possible_agents,
        models=models,
        memories=memories,
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces,
        action_spaces=env.action_spaces,
        device=env.device,
        cfg=cfg,
    )


def _share_models(env: MultiAgentEnvWrapper, models: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Agents whose spaces equal an earlier agent's take that agent's model objects."""
    owners: list[tuple[tuple, str]] = []
    for uid in env.possible_agents:
        key = (env.observation_spaces[uid], env.state_spaces[uid], env.action_spaces[uid])
        owner = next((o for k, o in owners if k == key), None)
        if owner is None:
            owners.append((key, uid))
        else:
            models[uid] = models[owner]
    return models


def _team_critic(
    env: MultiAgentEnvWrapper, models: dict[str, dict[str, Any]], *, roles: tuple[str, ...] = ("value",)
) -> dict[str, dict[str, Any]]:
    """Every agent takes the first agent's models of ``roles`` (HAPPO's value model, the off-policy agents' critics
    and their targets: a team critic); the others built are dropped."""
    first = env.possible_agents[0]
    differ = [uid for uid in env.possible_agents if env.state_spaces.get(uid) != env.state_spaces.get(first)]
    if differ:
        raise ValueError(
            f"Runner: models.team_critic gives every agent {first}'s critic, but the state spaces of {differ} "
            f"differ from {first}'s; give each agent a critic of its own (team_critic: false)"
        )
    shared = {role: models[first][role] for role in roles if role in models[first]}
    return {uid: {**own, **shared} for uid, own in models.items()}
