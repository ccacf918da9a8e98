"""skrl's ``StepTrainer``, fixed for multi-agents, and the one env step every driver of an agent runs.

skrl 2.1.1's ``StepTrainer`` slices the observations with ``observations[scope[0]:scope[1]]`` and stacks the actions
with ``torch.vstack``; both fail when they are ``{agent: tensor}`` dicts, so no multi-agent (skrl's own MAPPO/IPPO
included) can be driven step by step. :class:`StepTrainer` here is a drop-in subclass: for one multi-agent it runs the
same steps as skrl's (``pre_interaction``, ``act``, ``env.step``, ``record_transition``, ``post_interaction``, env
reset) on the dicts as they are; anything else (single agents, simultaneous agents) goes to skrl's implementation.

Evaluation acts with ``outputs["mean_actions"]`` (the mean or greedy actions, ``{agent: tensor}``) unless
``cfg.stochastic_evaluation`` is set, as skrl's trainers do for single agents.

:func:`interact` is the body of that loop, one env step, with hooks: the trainer, ``skrl-marl eval``, code that times
its phases and the tests (which rewrite the env's infos) all step an agent through it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import tqdm
from skrl.envs.wrappers.torch import MultiAgentEnvWrapper
from skrl.multi_agents.torch import MultiAgent
from skrl.trainers.torch import StepTrainer as _SkrlStepTrainer
from skrl.trainers.torch.step import StepTrainerCfg

from skrl_marl_ext.keys import MEAN_ACTIONS_KEY

__all__ = [
    "PHASES",
    "StepResult",
    "StepTrainer",
    "StepTrainerCfg",
    "env_info_hook",
    "interact",
    "mean_episode_return",
    "track_phase_times",
]

PHASES = ("pre_interaction", "act", "env", "record", "post_interaction")
"""The phases of :func:`interact`, in order, as its ``on_phase`` hook names them (``env`` is ``env.step`` and
``env.state``, ``record`` is ``record_transition``)."""

_SKRL_TIMERS = {"act": "Stats / Inference time (ms)", "env": "Stats / Env stepping time (ms)"}


class StepResult(NamedTuple):
    """What one :func:`interact` step produced (dicts keyed by agent, as the env returns them)."""

    actions: dict[str, torch.Tensor]
    next_observations: dict[str, torch.Tensor]
    next_states: dict[str, torch.Tensor | None]
    rewards: dict[str, torch.Tensor]
    terminated: dict[str, torch.Tensor]
    truncated: dict[str, torch.Tensor]
    infos: dict[str, Any]


def track_phase_times(agent: MultiAgent) -> Callable[[str, float], None]:
    """An ``on_phase`` hook for :func:`interact` that tracks what skrl's trainers track about a step.

    ``act`` and ``env`` go to the agent's ``Stats / Inference time (ms)`` and ``Stats / Env stepping time (ms)``
    (written to TensorBoard at the agent's write interval); the other phases are not tracked.

    :param agent: The agent whose tracking data receives the times.
    """

    def on_phase(phase: str, milliseconds: float) -> None:
        tag = _SKRL_TIMERS.get(phase)
        if tag is not None:
            agent.track_data(tag, milliseconds)

    return on_phase


def _lap(on_phase: Callable[[str, float], None] | None, phase: str, start: float) -> float:
    """Report the time since ``start`` as ``phase`` to ``on_phase`` (if any); return the clock for the next phase."""
    now = time.perf_counter()
    if on_phase is not None:
        on_phase(phase, (now - start) * 1000.0)
    return now


def interact(
    agent: MultiAgent,
    env: Any,
    observations: dict[str, torch.Tensor],
    states: dict[str, torch.Tensor | None],
    *,
    timestep: int,
    timesteps: int,
    learn: bool = True,
    deterministic: bool = False,
    infos_fn: Callable[[int, dict[str, Any]], dict[str, Any]] | None = None,
    on_phase: Callable[[str, float], None] | None = None,
) -> StepResult:
    """Step ``env`` once through a multi-agent's lifecycle: the body of skrl's trainer loop.

    ``pre_interaction``; under ``torch.no_grad()`` ``act``, ``env.step`` and ``env.state``, ``record_transition``;
    then ``post_interaction``. The agent's mode (``enable_training_mode``) is the caller's, as is what to feed the
    next step (the returned ``next_observations``/``next_states``, or a reset). Single-agent skrl agents have another
    signature and are not driven here.

    :param agent: The multi-agent (initialised with ``agent.init()``, as skrl's trainers do).
    :param env: A skrl multi-agent env wrapper (anything with ``step(actions)`` and ``state()``).
    :param observations: The observations to act on, ``{agent: tensor}``.
    :param states: The env's states for them, ``{agent: tensor or None}``.
    :param timestep: Current timestep.
    :param timesteps: Total number of timesteps.
    :param learn: Call the agent's ``post_interaction`` (where it learns in training mode); False calls only skrl's
        ``MultiAgent.post_interaction`` (tracking data and checkpoints, no update), as skrl's trainers do to evaluate.
    :param deterministic: Step the env with ``outputs["mean_actions"]`` (the mean or greedy actions this package's
        agents give in evaluation mode) where the agent gives them, instead of the actions it sampled.
    :param infos_fn: Called as ``infos_fn(timestep, infos)`` with the env's step infos, before they are recorded;
        what it returns is recorded and returned instead (a test rewriting them, a trainer rendering or tracking).
    :param on_phase: Called as ``on_phase(phase, milliseconds)`` after each of :data:`PHASES`;
        :func:`track_phase_times` gives the hook that tracks what skrl's trainers track.

    :return: The actions taken and what the env returned for them.
    """
    start = time.perf_counter()
    agent.pre_interaction(timestep=timestep, timesteps=timesteps)
    start = _lap(on_phase, "pre_interaction", start)
    with torch.no_grad():
        actions, outputs = agent.act(observations, states, timestep=timestep, timesteps=timesteps)
        if deterministic:
            actions = outputs.get(MEAN_ACTIONS_KEY, actions)
        start = _lap(on_phase, "act", start)
        next_observations, rewards, terminated, truncated, infos = env.step(actions)
        next_states = env.state()
        start = _lap(on_phase, "env", start)
        if infos_fn is not None:
            infos = infos_fn(timestep, infos)
            start = time.perf_counter()
        step = StepResult(actions, next_observations, next_states, rewards, terminated, truncated, infos)
        _record(agent, observations, states, step, timestep=timestep, timesteps=timesteps)
        start = _lap(on_phase, "record", start)
    if learn:
        agent.post_interaction(timestep=timestep, timesteps=timesteps)
    else:
        MultiAgent.post_interaction(agent, timestep=timestep, timesteps=timesteps)
    _lap(on_phase, "post_interaction", start)
    return step


def _record(agent: MultiAgent, observations: dict, states: dict, step: StepResult, *, timestep: int, timesteps: int):
    """``agent.record_transition`` of the step from ``observations`` and ``states`` that produced ``step``."""
    agent.record_transition(
        observations=observations,
        states=states,
        actions=step.actions,
        rewards=step.rewards,
        next_observations=step.next_observations,
        next_states=step.next_states,
        terminated=step.terminated,
        truncated=step.truncated,
        infos=step.infos,
        timestep=timestep,
        timesteps=timesteps,
    )


def mean_episode_return(
    agent: MultiAgent, env: Any, *, steps: int = 100, uid: str | None = None, whole_episodes: bool = False
) -> float:
    """Mean return of agent ``uid`` (the first agent when None) over the episodes that end within ``steps`` steps of
    the agent in evaluation mode, acting with its mean/greedy actions (:func:`interact` with ``deterministic``), from a
    reset of ``env``; NaN when no episode ends. One host read per step.

    :param whole_episodes: Count only episodes that also began within the ``steps``, i.e. after each env's first
        episode end. skrl's Isaac Lab wrappers reset the env only once, so after training the first episode of each env
        is one already under way, which a recurrent policy (whose hidden states start from zero here) did not see
        begin.
    """
    uid = uid or env.possible_agents[0]
    agent.enable_training_mode(False)
    obs, _ = env.reset()
    if hasattr(agent, "reset_recurrent_states"):  # recurrent models start from zero hidden states
        agent.reset_recurrent_states()
    states = env.state()
    running, finished = torch.zeros(env.num_envs), []
    began = torch.full((env.num_envs,), not whole_episodes)
    for t in range(steps):
        step = interact(agent, env, obs, states, timestep=t, timesteps=steps, learn=False, deterministic=True)
        obs, states = step.next_observations, step.next_states
        running += step.rewards[uid].view(-1).cpu()
        done = (step.terminated[uid] | step.truncated[uid]).view(-1).cpu()
        finished += running[done & began].tolist()
        running[done] = 0.0
        began |= done
    return sum(finished) / len(finished) if finished else float("nan")


class StepTrainer(_SkrlStepTrainer):
    """Step-by-step trainer that also works for multi-agents (same constructor and methods as skrl's)."""

    def _single_multi_agent(self) -> MultiAgent | None:
        agents = self.agents
        if isinstance(agents, (tuple, list)):
            agents = agents[0] if len(agents) == 1 else None
        return agents if isinstance(agents, MultiAgent) else None

    def train(self, timestep: int | None = None, timesteps: int | None = None) -> tuple[Any, Any, Any, Any, Any]:
        """Execute one training step (see skrl's ``StepTrainer.train``).

        :param timestep: Current timestep; None counts internally.
        :param timesteps: Total number of timesteps; None takes ``cfg.timesteps``.

        :return: The env's next observations, rewards, terminated, truncated and infos (dicts keyed by agent).
        """
        return self._dispatch(True, timestep, timesteps)

    def eval(self, timestep: int | None = None, timesteps: int | None = None) -> tuple[Any, Any, Any, Any, Any]:
        """Execute one evaluation step (see skrl's ``StepTrainer.eval``): no learning, mean/greedy actions.

        :param timestep: Current timestep; None counts internally.
        :param timesteps: Total number of timesteps; None takes ``cfg.timesteps``.

        :return: The env's next observations, rewards, terminated, truncated and infos (dicts keyed by agent).
        """
        return self._dispatch(False, timestep, timesteps)

    def _dispatch(self, training: bool, timestep: int | None, timesteps: int | None):
        """One multi-agent goes through :meth:`_step`; anything else through skrl's ``train``/``eval``."""
        agent = self._single_multi_agent()
        if agent is None:
            skrl_step = super().train if training else super().eval
            return skrl_step(timestep=timestep, timesteps=timesteps)
        return self._step(agent, training=training, timestep=timestep, timesteps=timesteps)

    def _step(self, agent: MultiAgent, *, training: bool, timestep: int | None, timesteps: int | None):
        if timestep is None:
            self._timestep += 1
            timestep = self._timestep
        timesteps = timesteps if timesteps is not None else self.cfg.timesteps
        if self._progress is None:
            self._progress = tqdm.tqdm(total=timesteps, disable=self.cfg.disable_progressbar, file=sys.stdout)
        self._progress.update(n=1)

        agent.enable_training_mode(training)
        if self.observations is None:
            self.observations, _ = self.env.reset()
            self.states = self.env.state()

        step = interact(
            agent,
            self.env,
            self.observations,
            self.states,
            timestep=timestep,
            timesteps=timesteps,
            learn=training,
            deterministic=not training and not self.cfg.stochastic_evaluation,
            infos_fn=env_info_hook(agent, self.env, self.cfg),
            on_phase=track_phase_times(agent),
        )

        should_reset = self.env.num_envs == 1 and isinstance(self.env, MultiAgentEnvWrapper) and not self.env.agents
        if should_reset:
            with torch.no_grad():
                self.observations, _ = self.env.reset()
                self.states = self.env.state()
        else:
            self.observations, self.states = step.next_observations, step.next_states
        return step.next_observations, step.rewards, step.terminated, step.truncated, step.infos


def env_info_hook(agent: MultiAgent, env: Any, cfg: Any) -> Callable[[int, dict[str, Any]], dict[str, Any]]:
    """The ``infos_fn`` of :func:`interact` that does what skrl's trainers do after ``env.step``: render the env
    every ``cfg.render_interval`` steps unless ``cfg.headless``, and track the scalars of
    ``infos[cfg.environment_info]``.

    :param agent: The agent whose tracking data receives the scalars.
    :param env: The env to render.
    :param cfg: A skrl trainer config (``headless``, ``render_interval``, ``environment_info``).
    """

    def after_env_step(timestep: int, infos: dict[str, Any]) -> dict[str, Any]:
        if not cfg.headless and not timestep % cfg.render_interval:
            env.render()
        for key, value in infos.get(cfg.environment_info, {}).items():
            if isinstance(value, torch.Tensor) and value.numel() == 1:
                agent.track_data(key if "/" in key else f"Info / {key}", value.item())
        return infos

    return after_env_step
