"""Construction-time checks shared by the agents: bad input is refused with the argument and the fix named."""

from __future__ import annotations

from typing import Any

import gymnasium
import torch
from skrl.models.torch import (
    CategoricalMixin,
    GaussianMixin,
    Model,
    MultiCategoricalMixin,
    MultivariateGaussianMixin,
)
from skrl.utils.spaces.torch import compute_space_size

RESERVED_AGENT_NAMES = ("mean_actions",)


def _check_space_dict(owner: str, name: str, spaces: Any, possible_agents: list[str], *, allow_none=False) -> None:
    if not isinstance(spaces, dict):
        raise ValueError(f"{owner}: {name} must be a dict {{agent: gymnasium space}}, e.g. {name}=env.{name}")
    for uid in possible_agents:
        space = spaces.get(uid)
        if space is None and allow_none:
            continue
        if not isinstance(space, gymnasium.Space):
            raise ValueError(
                f"{owner}: {name}['{uid}'] is {space!r}, not a gymnasium space; pass {name}=env.{name} "
                "(skrl's wrappers convert gym spaces to gymnasium ones)"
            )


def _check_names(owner: str, possible_agents: Any) -> None:
    """``possible_agents``: a non-empty list of distinct string names, none reserved."""
    if isinstance(possible_agents, str) or not isinstance(possible_agents, (list, tuple)) or not possible_agents:
        raise ValueError(f"{owner}: possible_agents must be a non-empty list of agent names, e.g. env.possible_agents")
    if len(set(possible_agents)) != len(possible_agents):
        raise ValueError(f"{owner}: possible_agents has repeated names: {list(possible_agents)}")
    for uid in possible_agents:
        if not isinstance(uid, str):
            raise ValueError(f"{owner}: agent names must be strings, got {uid!r} in possible_agents")
        if uid in RESERVED_AGENT_NAMES:
            raise ValueError(f"{owner}: '{uid}' is reserved in the outputs of act(); rename that agent")


def _check_models(owner: str, possible_agents: Any, models: Any, roles: tuple[str, ...]) -> None:
    """``models``: a skrl ``Model`` for every role of every agent, and no entry for another name."""
    if not isinstance(models, dict):
        raise ValueError(f"{owner}: models must be a dict {{agent: {{role: Model}}}} with roles {list(roles)}")
    unknown = sorted(set(models) - set(possible_agents))
    if unknown:
        raise ValueError(f"{owner}: models has entries for {unknown}, which are not in possible_agents")
    for uid in possible_agents:
        if uid not in models or not isinstance(models[uid], dict):
            raise ValueError(
                f"{owner}: agent '{uid}' is in possible_agents but has no models; give models['{uid}'] = "
                f"{{{', '.join(repr(r) + ': ...' for r in roles)}}}"
            )
        for role in roles:
            model = models[uid].get(role)
            if model is None:
                raise ValueError(
                    f"{owner}: models['{uid}'] has no '{role}' model; {owner} needs models[agent] = "
                    f"{{{', '.join(repr(r) + ': ...' for r in roles)}}}"
                )
            if not isinstance(model, Model):
                raise ValueError(
                    f"{owner}: models['{uid}']['{role}'] is a {type(model).__name__}, not a skrl Model "
                    "(subclass skrl.models.torch.Model with a mixin such as GaussianMixin)"
                )


def check_agent_inputs(
    *,
    owner: str,
    possible_agents: Any,
    models: Any,
    roles: tuple[str, ...],
    observation_spaces: Any,
    state_spaces: Any,
    action_spaces: Any,
    need_states: bool,
) -> None:
    """Check the constructor arguments every agent takes; raise a ValueError that names the argument and the fix.

    :param owner: Agent class name, for the messages.
    :param possible_agents: Agent names.
    :param models: ``{agent: {role: Model}}``.
    :param roles: Roles every agent's models dict must hold.
    :param observation_spaces: ``{agent: space}``.
    :param state_spaces: ``{agent: space}`` or None.
    :param action_spaces: ``{agent: space}``.
    :param need_states: Whether the agent cannot work without state spaces (a centralised critic).
    """
    _check_names(owner, possible_agents)
    _check_models(owner, possible_agents, models, roles)
    _check_space_dict(owner, "observation_spaces", observation_spaces, possible_agents)
    _check_space_dict(owner, "action_spaces", action_spaces, possible_agents)
    for uid in possible_agents:
        space = action_spaces[uid]
        if not isinstance(space, (gymnasium.spaces.Box, gymnasium.spaces.Discrete, gymnasium.spaces.MultiDiscrete)):
            raise ValueError(
                f"{owner}: action_spaces['{uid}'] is {space}; supported action spaces are Box, Discrete and "
                "MultiDiscrete"
            )
    if need_states:
        missing = [
            uid for uid in possible_agents if not isinstance(state_spaces, dict) or state_spaces.get(uid) is None
        ]
        if missing:
            raise ValueError(
                f"{owner} needs state_spaces for its centralised critic (missing for {missing}); "
                "pass state_spaces=env.state_spaces, or use IPPO, whose critic reads observations"
            )
    if state_spaces is not None:
        _check_space_dict(owner, "state_spaces", state_spaces, possible_agents, allow_none=True)


def check_policy_family(*, owner: str, uids: list[str], policy: Model, action_space: gymnasium.Space) -> None:
    """Refuse a stochastic policy whose distribution does not fit the action space.

    The policy's *distribution* mixin decides: a skrl shared model such as ``shared_model(..., structure=
    [CategoricalMixin, DeterministicMixin])`` is a categorical policy (its DeterministicMixin serves the value role).
    """
    continuous = isinstance(policy, (GaussianMixin, MultivariateGaussianMixin))
    discrete = isinstance(policy, (CategoricalMixin, MultiCategoricalMixin))
    if isinstance(action_space, gymnasium.spaces.Discrete) and continuous and not discrete:
        raise ValueError(
            f"{owner}: the policy of agents {uids} is a {type(policy).__name__} (continuous actions) but their action "
            f"space is {action_space}; use CategoricalMixin (or skrl_marl_ext.models.MaskedCategoricalMixin)"
        )
    if isinstance(action_space, gymnasium.spaces.Box) and discrete and not continuous:
        raise ValueError(
            f"{owner}: the policy of agents {uids} is a {type(policy).__name__} (discrete actions) but their action "
            f"space is {action_space}; use GaussianMixin for Box actions"
        )
    if isinstance(action_space, gymnasium.spaces.MultiDiscrete) and not isinstance(policy, MultiCategoricalMixin):
        raise ValueError(
            f"{owner}: agents {uids} have a MultiDiscrete action space; their policy must be a MultiCategoricalMixin"
        )
    if not (continuous or discrete):
        raise ValueError(
            f"{owner}: the policy of agents {uids} is a {type(policy).__name__}, which has no distribution to sample "
            "from and no log-probability; a PPO policy needs GaussianMixin or MultivariateGaussianMixin (Box actions) "
            "or CategoricalMixin (Discrete actions)"
        )


def _shapes(inputs: dict[str, Any]) -> str:
    return ", ".join(f"{k} {tuple(v.shape)}" for k, v in inputs.items() if torch.is_tensor(v))


def call_model(owner: str, what: str, model: Model, inputs: dict[str, Any], *, role: str, hint: str) -> tuple:
    """``model.act(inputs, role=role)``; a failure of the user's model becomes a ValueError saying on what inputs.

    :param what: How the message names the model, e.g. ``"the policy of agents ['agent_0']"``.
    :param hint: The fix, appended to the message.
    """
    try:
        return model.act(inputs, role=role)
    except Exception as e:
        raise ValueError(
            f"{owner}: {what} failed on inputs ({_shapes(inputs)}): {type(e).__name__}: {e}. {hint}"
        ) from e


def expect_shape(owner: str, what: str, got: torch.Tensor, expected: tuple[int, ...], *, hint: str) -> None:
    """Raise a ValueError naming the model, the shape it returned and the expected one, unless they agree."""
    if tuple(got.shape) != tuple(expected):
        raise ValueError(f"{owner}: {what} returns shape {tuple(got.shape)}, expected {tuple(expected)}; {hint}")


def dry_run(
    *,
    owner: str,
    group: Any,
    policy_inputs: dict[str, Any],
    value_inputs: dict[str, Any] | None = None,
    device: torch.device,
) -> None:
    """Run a group's policy (and value model, when ``value_inputs`` are given) once on zeros of the shapes the agent
    will feed them, and check what comes back. The RNG state is restored afterwards (a seeded run is unchanged).

    :param group: An :class:`~skrl_marl_ext.groups.AgentGroup` (its agents, models and action space).

    :raises ValueError: Naming the agents, the model, the input shapes and the expected output shape.
    """
    rows = next(v for v in policy_inputs.values() if torch.is_tensor(v)).shape[0]
    action_size = compute_space_size(group.action_space, occupied_size=True)
    what = f"the policy of agents {group.uids}"
    devices = [device] if torch.device(device).type == "cuda" else []
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        size_hint = (
            "Size the model from observation_spaces/state_spaces (and skrl_marl_ext.models.agent_id_space when "
            "cfg.agent_id_input is on)"
        )
        actions, outputs = call_model(owner, what, group.models["policy"], policy_inputs, role="policy", hint=size_hint)
        expect_shape(
            owner,
            what,
            actions,
            (rows, action_size),
            hint=f"the action space {group.action_space} needs that: size the policy's output from action_spaces",
        )
        if "log_prob" in outputs:
            expect_shape(
                owner, f"{what} (log_prob)", outputs["log_prob"], (rows, 1), hint="keep the mixin's reduction='sum'"
            )
        if value_inputs is None:
            return
        # twice: a skrl shared model (single forward pass) answers a value call that follows a policy call from the
        # policy call's cached output (and clears it), which would hide a value model fed the wrong inputs; the
        # second call computes from the value inputs themselves
        what = f"the value model of agents {group.uids}"
        value_hint = (
            "Size the model from the spaces it reads (a value model sized from the state space reads "
            "inputs['states'], the env's state; one that reads inputs['observations'] is sized from the observation "
            "space)"
        )
        for _ in range(2):
            values, _ = call_model(owner, what, group.models["value"], value_inputs, role="value", hint=value_hint)
            expect_shape(owner, what, values, (rows, 1), hint=value_hint)
