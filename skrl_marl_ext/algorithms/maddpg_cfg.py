"""Configuration of :class:`~skrl_marl_ext.MADDPG`: skrl 2.x ``DDPG_CFG``'s fields where they apply, per agent."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

from skrl_marl_ext.checks.values import check_choice, check_range
from skrl_marl_ext.config import MarlCfg


@dataclasses.dataclass(kw_only=True)
class MADDPG_CFG(MarlCfg):
    """Configuration of :class:`~skrl_marl_ext.MADDPG` (Lowe et al. 2017, https://arxiv.org/abs/1706.02275).

    Fields marked *per agent* take one value or a dict naming every agent; agents that share models (a group) must be
    given the same value. The other fields hold one value for all agents: every gradient step draws one set of
    transitions for all agents, so its size and timing cannot differ between them.
    """

    shared_fields: ClassVar[tuple[str, ...]] = (
        "experiment",
        "non_finite",
        "batch_size",
        "gradient_steps",
        "random_timesteps",
        "learning_starts",
        "exploration_noise",
        "exploration_initial_scale",
        "exploration_final_scale",
        "exploration_timesteps",
        "smooth_regularization_noise",
        "smooth_regularization_clip",
        "policy_delay",
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
    updated from the unmasked rows of every sampled batch (as skrl's DDPG does with ``train=True``)."""

    observation_preprocessor_kwargs: dict = dataclasses.field(default_factory=dict)
    """Keyword arguments of the observation preprocessor; ``size`` and ``device`` are filled in when missing."""

    state_preprocessor: type | None | dict = None
    """Preprocessor class for the critics' states (per agent): the env's global state, or the concatenated
    observations when the env has none. Updated like the observation preprocessor."""

    state_preprocessor_kwargs: dict = dataclasses.field(default_factory=dict)
    """Keyword arguments of the state preprocessor; ``size`` and ``device`` are filled in when missing."""

    random_timesteps: int = 0
    """Timesteps at the start of training during which actions are drawn at random inside the action spaces: uniformly
    where bounded; where a Box bound is infinite, the exploration noise around the point nearest 0, clipped."""

    learning_starts: int = 0
    """Timesteps at the start of training before the first gradient step (the memories only fill)."""

    grad_norm_clip: float | dict[str, float] = 0.5
    """Maximum global norm of the policy and of the critic gradients of a group, each clipped on its own (per agent);
    ``<= 0`` disables clipping. 0.5 as in the MADDPG paper's code."""

    exploration_noise: Any = None
    """Exploration noise of continuous actions: an instance of a skrl noise (``GaussianNoise``,
    ``OrnsteinUhlenbeckNoise``; anything with ``sample(size) -> tensor``). Each group of agents gets its own copy.
    None means ``GaussianNoise(mean=0, std=0.3)`` on the agent's device (30% of a [-1, 1] action range; with the
    default schedule it ends at std 0.03). Discrete actions explore by sampling their categorical policy instead."""

    exploration_initial_scale: float = 1.0
    """Factor on the noise at the first timestep; 0 turns the noise off."""

    exploration_final_scale: float = 0.1
    """Factor on the noise at ``exploration_timesteps`` and after; the factor moves linearly in between. 0.1: explore
    widely first, then act near the policy (the returns a run reports are those of its noisy actions); it did at
    least as well as 0.3 in the learning study (docs/results/learning.md). BenchMARL anneals its noise to
    0.01."""

    exploration_timesteps: int | None = None
    """Timesteps over which the noise factor goes from the initial to the final scale; None: the first third of the
    trainer's ``timesteps`` (BenchMARL's default, ``max_n_frames / 3``)."""

    smooth_regularization_noise: Any = None
    """Target policy smoothing (TD3's, skrl ``TD3_CFG``'s name): a noise instance (e.g. skrl's
    ``GaussianNoise(mean=0, std=0.2)``) whose samples, clipped to ``+-smooth_regularization_clip``, are added to the
    target policies' continuous actions ``mu'(o')`` of the critic targets, which are then clipped to the action bounds.
    None: no smoothing (the MADDPG paper)."""

    smooth_regularization_clip: float = 0.5
    """Bound of the smoothing noise's samples (TD3's and skrl's 0.5), in action units."""

    policy_delay: int = 1
    """The actors and all target networks step once every ``policy_delay`` gradient steps; the critics every step
    (TD3's delayed policy update, skrl ``TD3_CFG``'s name; TD3 uses 2). One value for all agents. 1 (default): every
    step, the MADDPG paper's. The count of gradient steps is saved in checkpoints (module ``progress``), so a resumed
    run keeps the phase."""

    policy_regularization: float | None | dict[str, float | None] = 0.0
    """Weight of the mean square of a continuous policy's output before its ``tanh``
    (``outputs["pre_tanh_actions"]``, :data:`~skrl_marl_ext.keys.PRE_TANH_ACTIONS_KEY`) added to the actor loss
    (per agent). The MADDPG paper's code adds it with weight 1e-3; it keeps the policy off the flat ends of the
    ``tanh``, where the critic's gradient no longer moves it. It helped navigation with a large replay but cost
    balance (docs/results/maddpg_defaults.md), so it is off by default. 0 (default): none.
    None: 1e-3 for policies that give the output (:class:`~skrl_marl_ext.models.DeterministicMLP` does), none for
    those that do not (a warning says so). A weight > 0 for a policy that does not give the output is refused at
    construction."""

    gumbel_temperature: float | dict[str, float] = 1.0
    """Temperature of the straight-through Gumbel-softmax through which discrete actors are trained (per agent)."""

    time_limit_bootstrap: bool | dict[str, bool] = False
    """Learn the critic from truncated transitions, bootstrapping from their next observation (per agent). Off by
    default, as in skrl: truncated transitions are then left out of the critic loss (they still train the actor).

    Vectorised envs reset in place, so the observation returned at a truncation is the *next* episode's first one.
    Where the env hands the episode's final observation and state in its step infos (``infos["final_observations"]``
    / ``infos["final_states"]``, :mod:`skrl_marl_ext.keys`; this package's VMAS, batched PettingZoo and built-in envs
    do), MADDPG stores those as the transition's next observation and state, and turning this on bootstraps right.
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

    def validate(self, *, owner: str = "MADDPG") -> bool:
        """Check the value ranges; raise a ValueError naming the field and the accepted range."""
        check_choice(owner, "non_finite", self.non_finite, ("raise", "skip"))
        for name in ("batch_agent_models", "checkpoint_replay"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{owner}: cfg.{name} must be True or False, got {getattr(self, name)!r}")
        for name in ("batch_size", "gradient_steps", "policy_delay"):
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
        check_range(owner, "gumbel_temperature", self.gumbel_temperature, low=0.0, low_open=True)
        weights = self.policy_regularization
        weights = weights if isinstance(weights, dict) else {"": weights}
        check_range(owner, "policy_regularization", {k: v for k, v in weights.items() if v is not None}, low=0.0)
        check_range(owner, "smooth_regularization_clip", self.smooth_regularization_clip, low=0.0)
        check_range(owner, "grad_norm_clip", self.grad_norm_clip)
        check_range(owner, "exploration_initial_scale", self.exploration_initial_scale, low=0.0)
        check_range(owner, "exploration_final_scale", self.exploration_final_scale, low=0.0)
        steps = self.exploration_timesteps
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
            raise ValueError(f"{owner}: cfg.exploration_timesteps must be a positive integer or None, got {steps!r}")
        for name in ("exploration_noise", "smooth_regularization_noise"):
            noise = getattr(self, name)
            if isinstance(noise, type) or (noise is not None and not callable(getattr(noise, "sample", None))):
                raise ValueError(
                    f"{owner}: cfg.{name} must be a noise instance with sample(size) (e.g. skrl's "
                    f"GaussianNoise(mean=0.0, std=0.1, device=device)) or None, got {noise!r}"
                )
        if self.rewards_shaper is not None and not callable(self.rewards_shaper):
            raise ValueError(f"{owner}: cfg.rewards_shaper must be callable or None, got {self.rewards_shaper!r}")
        return True
