"""skrl's ``StepTrainer``, fixed for multi-agents.

skrl 2.1.1's ``StepTrainer`` slices the observations with ``observations[scope[0]:scope[1]]`` and stacks the actions
with ``torch.vstack``; both fail when they are ``{agent: tensor}`` dicts, so no multi-agent (skrl's own MAPPO/IPPO
included) can be driven step by step. :class:`StepTrainer` here is a drop-in subclass: for one multi-agent it runs the
same steps as skrl's (``pre_interaction``, ``act``, ``env.step``, ``record_transition``, ``post_interaction``, env
reset) on the dicts as they are; anything else (single agents, simultaneous agents) goes to skrl's implementation.

Evaluation acts with ``outputs["mean_actions"]`` (the mean or greedy actions, ``{agent: tensor}``) unless
``cfg.stochastic_evaluation`` is set, as skrl's trainers do for single agents.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
import tqdm
from skrl.envs.wrappers.torch import MultiAgentEnvWrapper
from skrl.multi_agents.torch import MultiAgent
from skrl.trainers.torch import StepTrainer as _SkrlStepTrainer
from skrl.trainers.torch.step import StepTrainerCfg
from skrl.utils import ScopedTimer

__all__ = ["StepTrainer", "StepTrainerCfg"]


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
        agent = self._single_multi_agent()
        if agent is None:
            return super().train(timestep=timestep, timesteps=timesteps)
        return self._step(agent, training=True, timestep=timestep, timesteps=timesteps)

    def eval(self, timestep: int | None = None, timesteps: int | None = None) -> tuple[Any, Any, Any, Any, Any]:
        """Execute one evaluation step (see skrl's ``StepTrainer.eval``).

        :param timestep: Current timestep; None counts internally.
        :param timesteps: Total number of timesteps; None takes ``cfg.timesteps``.

        :return: The env's next observations, rewards, terminated, truncated and infos (dicts keyed by agent).
        """
        agent = self._single_multi_agent()
        if agent is None:
            return super().eval(timestep=timestep, timesteps=timesteps)
        return self._step(agent, training=False, timestep=timestep, timesteps=timesteps)

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

        agent.pre_interaction(timestep=timestep, timesteps=timesteps)
        with torch.no_grad():
            with ScopedTimer() as timer:
                actions, outputs = agent.act(self.observations, self.states, timestep=timestep, timesteps=timesteps)
                agent.track_data("Stats / Inference time (ms)", timer.elapsed_time_ms)
            if not training and not self.cfg.stochastic_evaluation:
                actions = outputs.get("mean_actions", actions)

            with ScopedTimer() as timer:
                next_observations, rewards, terminated, truncated, infos = self.env.step(actions)
                next_states = self.env.state()
                agent.track_data("Stats / Env stepping time (ms)", timer.elapsed_time_ms)

            if not self.cfg.headless and not timestep % self.cfg.render_interval:
                self.env.render()

            agent.record_transition(
                observations=self.observations,
                states=self.states,
                actions=actions,
                rewards=rewards,
                next_observations=next_observations,
                next_states=next_states,
                terminated=terminated,
                truncated=truncated,
                infos=infos,
                timestep=timestep,
                timesteps=timesteps,
            )
            if self.cfg.environment_info in infos:
                for k, v in infos[self.cfg.environment_info].items():
                    if isinstance(v, torch.Tensor) and v.numel() == 1:
                        agent.track_data(k if "/" in k else f"Info / {k}", v.item())

        if training:
            agent.post_interaction(timestep=timestep, timesteps=timesteps)
        else:  # as skrl's trainers: write tracking data without learning
            MultiAgent.post_interaction(agent, timestep=timestep, timesteps=timesteps)

        should_reset = self.env.num_envs == 1 and isinstance(self.env, MultiAgentEnvWrapper) and not self.env.agents
        if should_reset:
            with torch.no_grad():
                self.observations, _ = self.env.reset()
                self.states = self.env.state()
        else:
            self.observations, self.states = next_observations, next_states
        return next_observations, rewards, terminated, truncated, infos
