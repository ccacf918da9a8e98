"""What every off-policy agent of the package is configured with (:class:`~skrl_marl_ext.MADDPG`,
:class:`~skrl_marl_ext.MASAC`, :class:`~skrl_marl_ext.HASAC`): the replay and its batches, the gradient steps, the
learning rates, targets, preprocessors and checkpoints; skrl 2.x ``DDPG_CFG``'s and ``SAC_CFG``'s names where they
apply, per agent. Each algorithm's config adds its own fields."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import ClassVar

from skrl_marl_ext.checks.values import check_choice, check_range
from skrl_marl_ext.config import MarlCfg


@dataclasses.dataclass(kw_only=True)
class OffPolicyCfg(MarlCfg):
    """Fields of every off-policy agent's config.

    Fields marked *per agent* take one value or a dict naming every agent; agents that share models (a group) must be
    given the same value. The other fields hold one value for all agents: every gradient step draws one set of
    transitions for all agents, so its size and timing cannot differ between them.
    """

    shared_fields: ClassVar[tuple[str, ...]] = (
        "experiment",
        "non_finite",
        "batch_size",
        "gradient_steps",
        "n_step",
        "random_timesteps",
        "learning_starts",
        "rewards_shaper",
        "mixed_precision",
        "batch_agent_models",
        "checkpoint_replay",
    )

    gradient_steps: int = 2
    """Gradient steps per environment step (each draws a fresh batch). One value for all agents. 2: with many parallel
    envs one step of all of them is many transitions, and one gradient step per env step learned markedly slower in
    the MADDPG defaults study (docs/results/maddpg_defaults.md)."""

    batch_size: int = 1024
    """Number of joint transitions per gradient step: the same (step, env) rows of every agent's memory.
    One value for all agents. 1024: fewer, larger steps than BenchMARL's 128 cost less Python per sample on a CPU."""

    discount_factor: float | dict[str, float] = 0.99
    """Discount factor ``gamma`` in ``[0, 1]`` (per agent). 0.99 as BenchMARL (VMAS episodes of 100+ steps); the MADDPG
    paper's 0.95 was for 25-step MPE episodes."""

    n_step: int = 1
    """*New.* Steps of reward in each critic target (HARL's ``n_step``): ``y = sum_{j<k} gamma^j r_{t+j} + gamma^k
    (1 - terminated_{t+k-1}) Q'(s_{t+k}, a')``, over the ``k <= n_step`` steps of the sampled transition's env from
    it on, fewer where an episode ends, a truncation follows (unless ``time_limit_bootstrap``), an agent did not act
    or the newest step is reached. The rewards in between are those of the actions stored, with no correction for
    the policies having moved since (as HARL's; MASAC and HASAC add no entropy term for them). One value for all
    agents. 1: skrl's one-step targets."""

    polyak: float | dict[str, float] = 0.005
    """Target network update weight in ``[0, 1]`` (per agent), skrl's convention:
    ``target = polyak * online + (1 - polyak) * target`` after every gradient step. 0.005 as BenchMARL (``polyak_tau``);
    with 2 gradient steps per env step the targets move as fast as 0.01 at one step (the paper's ``tau``)."""

    actor_learning_rate: float | dict[str, float] = 5e-4
    """Learning rate of the policies' Adam optimisers (per agent). Half the critic's: the policy follows the critic's
    gradient, which must be the better estimate."""

    critic_learning_rate: float | dict[str, float] = 1e-3
    """Learning rate of the critics' Adam optimisers (per agent)."""

    learning_rate_scheduler: type | tuple[type | None, type | None] | None | dict = None
    """Learning rate scheduler class (per agent), e.g. a ``torch.optim.lr_scheduler`` class, stepped after each step
    of its optimiser (the actor's only on the steps of ``policy_delay``; none for a step the grad scaler skipped), so
    the schedule counts the steps that happened. One class is used for both optimisers; a pair ``(actor, critic)``
    gives each its own (None for none)."""

    learning_rate_scheduler_kwargs: dict | tuple[dict, dict] = dataclasses.field(default_factory=dict)
    """Keyword arguments of the scheduler (without ``optimizer``), or a pair ``(actor, critic)`` of them."""

    observation_preprocessor: type | None | dict = None
    """Preprocessor class for observations (per agent), e.g. skrl's ``RunningStandardScaler``. Its statistics are
    updated from the unmasked rows of every sampled batch (as skrl's DDPG and SAC do with ``train=True``)."""

    observation_preprocessor_kwargs: dict = dataclasses.field(default_factory=dict)
    """Keyword arguments of the observation preprocessor; ``size`` and ``device`` are filled in when missing."""

    state_preprocessor: type | None | dict = None
    """Preprocessor class for the critics' states (per agent): the env's global state, or the concatenated
    observations when the env has none. Updated like the observation preprocessor."""

    state_preprocessor_kwargs: dict = dataclasses.field(default_factory=dict)
    """Keyword arguments of the state preprocessor; ``size`` and ``device`` are filled in when missing."""

    random_timesteps: int = 0
    """Timesteps at the start of training during which actions are drawn at random inside the action spaces: uniformly
    where bounded; where a Box bound is infinite, noise around the point nearest 0, clipped (MADDPG: its exploration
    noise; MASAC and HASAC: a standard normal)."""

    learning_starts: int = 0
    """Timesteps at the start of training before the first gradient step (the memories only fill)."""

    grad_norm_clip: float | dict[str, float] = 0.5
    """Maximum global norm of the policy and of the critic gradients of a group, each clipped on its own (per agent);
    ``<= 0`` disables clipping. 0.5 as in the MADDPG paper's code."""

    time_limit_bootstrap: bool | dict[str, bool] = False
    """Learn the critic from truncated transitions, bootstrapping from their next observation (per agent). Off by
    default, as in skrl: truncated transitions are then left out of the critic loss (they still train the actor).

    Vectorised envs reset in place, so the observation returned at a truncation is the *next* episode's first one.
    Where the env hands the episode's final observation and state in its step infos (``infos["final_observations"]``
    / ``infos["final_states"]``, :mod:`skrl_marl_ext.keys`; this package's VMAS, batched PettingZoo and built-in envs
    do), the agent stores those as the transition's next observation and state, and turning this on bootstraps right.
    Isaac Lab's envs give none: leave it off there."""

    rewards_shaper: Callable | None = None
    """Function ``(rewards, timestep, timesteps) -> rewards`` applied to each agent's ``(num_envs, 1)`` rewards
    before storage."""

    mixed_precision: bool = False
    """Run forward passes under ``torch.autocast`` (bf16 on CPU, fp16 on CUDA) with one ``GradScaler``."""

    batch_agent_models: bool = True
    """*New.* Run agents that have models of their own as one batch (``torch.func``: each role's parameters stacked,
    one vmapped call per role, e.g. the ``N`` critics on the same joint rows as one call, twin critics and twin target
    critics one call per pair) instead of one agent after the other. Each agent keeps its own losses, gradient
    clipping, statistics and checkpoint entries, so training is the per-agent loop's to float rounding. Agents batch
    where, role by role, their models have the same class and parameter shapes and a model serves one role, their
    spaces and per-agent config agree and the preprocessors are skrl's ``RunningStandardScaler`` or
    :class:`~skrl_marl_ext.ValueNorm` (or none). Gradients then reach the stacked tensors, not the models' own
    parameters (hooks registered on those see none). Off: the per-agent loop."""

    checkpoint_replay: bool = False
    """*New.* Save the replay memories' filled rows, write positions and the exploration noise's state in checkpoints
    (module ``replay``), so a resumed run equals an uninterrupted one. Size: ``memory_size * num_envs`` rows of every
    agent's stored widths (4 bytes a float, 1 a bool; docs/checkpoints.md). Off: checkpoints hold no replay."""

    def _normalize_expanded(self, possible_agents: list[str]) -> None:
        for uid in possible_agents:
            scheduler = self.learning_rate_scheduler[uid]
            if not isinstance(scheduler, (tuple, list)):
                scheduler = (scheduler, scheduler)
            self.learning_rate_scheduler[uid] = tuple(scheduler)
            kwargs = self.learning_rate_scheduler_kwargs[uid]
            if not isinstance(kwargs, (tuple, list)):
                kwargs = (kwargs, kwargs)
            self.learning_rate_scheduler_kwargs[uid] = tuple(dict(k or {}) for k in kwargs)

    def validate(self, *, owner: str) -> bool:
        """Check the value ranges of these fields; raise a ValueError naming the field and the accepted range."""
        check_choice(owner, "non_finite", self.non_finite, ("raise", "skip"))
        for name in ("batch_agent_models", "checkpoint_replay"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{owner}: cfg.{name} must be True or False, got {getattr(self, name)!r}")
        for name in ("batch_size", "gradient_steps", "n_step"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{owner}: cfg.{name} must be a positive integer, got {value!r}")
        for name in ("random_timesteps", "learning_starts"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{owner}: cfg.{name} must be an integer >= 0, got {value!r}")
        check_range(owner, "discount_factor", self.discount_factor, low=0.0, high=1.0)
        check_range(owner, "polyak", self.polyak, low=0.0, high=1.0)
        check_range(owner, "actor_learning_rate", self.actor_learning_rate, low=0.0, low_open=True)
        check_range(owner, "critic_learning_rate", self.critic_learning_rate, low=0.0, low_open=True)
        check_range(owner, "grad_norm_clip", self.grad_norm_clip)
        if self.rewards_shaper is not None and not callable(self.rewards_shaper):
            raise ValueError(f"{owner}: cfg.rewards_shaper must be callable or None, got {self.rewards_shaper!r}")
        return True
