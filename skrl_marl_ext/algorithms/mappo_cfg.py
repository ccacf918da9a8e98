"""Configuration of the on-policy agents (MAPPO and IPPO): a superset of skrl 2.x's ``MAPPO_CFG``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import ClassVar

from skrl_marl_ext.checks.values import check_choice, check_range
from skrl_marl_ext.config import MarlCfg
from skrl_marl_ext.features.compiled import compile_options


@dataclasses.dataclass(kw_only=True)
class OnPolicyCfg(MarlCfg):
    """Configuration shared by :class:`~skrl_marl_ext.MAPPO` and :class:`~skrl_marl_ext.IPPO`.

    Every field of skrl's ``MAPPO_CFG`` keeps its name and meaning; the defaults are skrl's, so a script written for
    skrl's MAPPO behaves the same unless it opts into the new fields. Where the behaviour differs from skrl it is
    because skrl's is a defect (see each field). Fields marked *per agent* take one value or a dict naming every
    agent; agents that share models (a group) must be given the same value.
    """

    shared_fields: ClassVar[tuple[str, ...]] = (
        "experiment",
        "non_finite",
        "rollouts",
        "rewards_shaper",
        "mixed_precision",
        "agent_id_input",
        "batch_agent_models",
        "update_agents_at_once",
        "compile",
    )

    rollouts: int = 16
    """Number of environment steps collected between updates (one value for all agents)."""

    learning_epochs: int | dict[str, int] = 8
    """Number of passes over the rollout per update (per agent)."""

    mini_batches: int | dict[str, int] = 2
    """Number of mini-batches the rollout is split into per epoch (per agent).

    A mini-batch holds the same ``rollouts * num_envs / mini_batches`` (step, env) samples for every agent of a group.
    """

    mini_batch_order: str | dict[str, str] = "shuffled"
    """*New.* How each epoch cuts the rollout into mini-batches (per agent). ``"shuffled"``: a fresh random permutation
    every epoch (the MAPPO paper's code, most PPO code). ``"sequential"``: the samples in order, i.e. each mini-batch
    ``rollouts / mini_batches`` consecutive steps of every env, the same blocks every epoch, as skrl 2.1.1's memories
    cut them (``sample_all``); recurrent mini-batches keep whole sequences either way."""

    discount_factor: float | dict[str, float] = 0.99
    """Discount factor ``gamma`` in ``[0, 1]`` (per agent)."""

    gae_lambda: float | dict[str, float] = 0.95
    """GAE ``lambda`` in ``[0, 1]`` (per agent)."""

    learning_rate: float | tuple[float, float] | dict[str, float | tuple[float, float]] = 1e-3
    """Learning rate (per agent). A pair ``(policy_lr, value_lr)`` gives the policy and the value model their own rate
    (two parameter groups of one optimiser; skrl 2.1.1 silently uses the first for both)."""

    learning_rate_scheduler: type | tuple[type | None, type | None] | None | dict = None
    """Learning rate scheduler class (per agent), e.g. skrl's ``KLAdaptiveLR`` or any ``torch.optim.lr_scheduler``
    class, stepped once per learning epoch (as skrl does; with mixed precision not after an epoch whose steps the grad
    scaler all skipped). ``KLAdaptiveLR`` receives the epoch's mean approximate KL, averaged over ranks (each agent of a
    batched group its own). A pair is accepted for skrl compatibility when both entries are the same class or the
    second is None (one optimiser per group serves both models)."""

    learning_rate_scheduler_kwargs: dict | tuple[dict, dict] = dataclasses.field(default_factory=dict)
    """Keyword arguments of the scheduler (without ``optimizer``), or a per-agent dict of them."""

    observation_preprocessor: type | None | dict = None
    """Preprocessor class for observations (per agent), e.g. skrl's ``RunningStandardScaler``. Its statistics are
    fixed while the rollout acts and take in the rollout's unmasked, finite observations once per update, before the
    epochs (skrl 2.1.1: mini-batch by mini-batch during the first epoch); see the MAPPO page, "Input statistics"."""

    observation_preprocessor_kwargs: dict = dataclasses.field(default_factory=dict)
    """Keyword arguments of the observation preprocessor; ``size`` and ``device`` are filled in when missing."""

    state_preprocessor: type | None | dict = None
    """Preprocessor class for states (per agent), updated like the observation preprocessor."""

    state_preprocessor_kwargs: dict = dataclasses.field(default_factory=dict)
    """Keyword arguments of the state preprocessor; ``size`` and ``device`` are filled in when missing."""

    value_preprocessor: type | None | dict = None
    """Preprocessor class for value targets (per agent): :class:`~skrl_marl_ext.preprocessors.ValueNorm` (the MAPPO
    paper's value normalisation) or skrl's ``RunningStandardScaler``. The critic learns normalised values; GAE runs
    in the original scale. Its statistics are updated once per update with the unmasked returns only (skrl 2.1.1
    updates them twice, with the old values and then the returns)."""

    value_preprocessor_kwargs: dict = dataclasses.field(default_factory=dict)
    """Keyword arguments of the value preprocessor; ``size`` (1) and ``device`` are filled in when missing."""

    grad_norm_clip: float | dict[str, float] = 0.5
    """Maximum global norm of a group's gradients (per agent); ``<= 0`` disables clipping. Gradients are unscaled
    (mixed precision) and averaged over ranks before clipping."""

    grad_norm_clip_mode: str | dict[str, str] = "joint"
    """*New.* What ``grad_norm_clip`` bounds (per agent). ``"joint"``: one norm over the policy's and the value
    model's gradients together (skrl's). ``"separate"``: each model's gradient on its own, both to ``grad_norm_clip``
    (the MAPPO paper's code and HARL, whose actor and critic have optimisers of their own); needs a policy and a value
    model that share no parameters. See "Paper code" in the docs."""

    optimizer_eps: float | None | dict[str, float | None] = None
    """*New.* Adam's ``eps`` (per agent); None keeps torch's default ``1e-8`` (skrl's). The MAPPO paper's code and
    HARL use ``1e-5``."""

    advantage_standardization: str | dict[str, str] = "per_agent"
    """*New.* Over which samples advantages are standardised (per agent). ``"per_agent"``: each agent's own (skrl's,
    HARL's); ``"pooled"``: all the samples of the agents that share one policy model (the MAPPO paper's code with its
    shared policy). Agents with policies of their own stay per agent either way."""

    log_prob_of_unclipped_actions: bool | dict[str, bool] = False
    """*New.* For Gaussian policies that clip their samples (skrl's ``clip_actions=True``): train on the unclipped
    sample and its log-probability while the env receives the clipped action (per agent). False keeps skrl's
    log-probability of the clipped action, which biases the update (see "Clipped actions" on the MAPPO page)."""

    ratio_clip: float | dict[str, float] = 0.2
    """Clipping coefficient of the surrogate objective (per agent); ``0`` is accepted, as skrl accepts it (the ratio
    is then clipped to 1: the surrogate is ``min(r * A, A)``)."""

    value_clip: float | dict[str, float] = 0.2
    """Value clipping range (per agent); ``<= 0`` disables it. The MAPPO paper's form is used: the loss is the *max*
    of the clipped and unclipped errors (skrl 2.1.1 takes only the clipped one, which can lower the loss)."""

    entropy_loss_scale: float | dict[str, float] = 0.0
    """Entropy bonus coefficient (per agent)."""

    value_loss_scale: float | dict[str, float] = 2.5
    """Value loss coefficient (per agent); the value loss is a squared error (no 1/2), as in skrl."""

    kl_threshold: float | dict[str, float] = 0.0
    """Early stopping (per agent): when a mini-batch's approximate KL (averaged over ranks) exceeds this, the agent
    takes no more steps in that epoch and the next epoch tries again, as in skrl; that KL counts in the epoch's mean
    for ``KLAdaptiveLR``. Each agent of a batched group stops on its own KL. ``0`` disables it (and its one host sync
    per mini-batch)."""

    time_limit_bootstrap: bool | dict[str, bool] = False
    """At truncated steps, bootstrap from ``gamma * V(final observation)`` and cut the GAE recursion (per agent):
    the right bootstrap of a time-out. The final observation comes from ``infos["final_observations"]`` where the env
    gives it (this package's envs do), else ``V(s_t)`` is used (rsl_rl's approximation). Off (skrl's default), a
    truncation is not an episode end, as in skrl 2.1.1: the advantage runs on into the next episode. Measured on and
    off at equal config, neither learned measurably better; see the MAPPO page, "Time limits"."""

    rewards_shaper: Callable | None = None
    """Function ``(rewards, timestep, timesteps) -> rewards`` applied before storage. It receives one group's rewards
    stacked, shape ``(num_agents_in_group, num_envs, 1)``; element-wise shapers behave as in skrl."""

    mixed_precision: bool = False
    """Run forward passes under ``torch.autocast`` (bf16 on CPU, fp16 on CUDA) with a ``GradScaler``."""

    huber_delta: float | dict[str, float] = 0.0
    """Huber threshold of the value loss (per agent); ``0`` keeps skrl's squared error. The Huber loss is scaled to
    equal the squared error inside ``[-delta, delta]``. The MAPPO paper uses Huber with ``delta=10``."""

    agent_id_input: bool = False
    """Append a one-hot agent id (position in the group) to the inputs of models shared by several agents: to the
    preprocessed observations, and to the states the critic reads. Size the models with
    :func:`skrl_marl_ext.models.agent_id_space`. Has no effect on agents with their own models."""

    batch_agent_models: bool | str = "auto"
    """*New.* Run agents that have models of their own (same class and shapes) as one ``torch.func`` batch, each
    keeping its own loss, statistics, gradient clip and checkpoint entries, instead of one after the other as skrl
    does. ``"auto"``: batched on a GPU; on a CPU only where at least 4 agents have models alike and no layer is wider
    than 128 units (a GRU's or LSTM's hidden size), where batching is not slower than the loop. True / False force
    either. Recurrent models batch where they run under ``torch.vmap`` (a dry run decides; see Recurrent models). See
    the MAPPO page, "Agents with models of their own"."""

    update_agents_at_once: int | str = "auto"
    """*New.* In a batched group's update, how many agents' forward and backward of a mini-batch run at once: their
    activations are alive together, so fewer hold less memory (1: one agent's, as skrl's loop) and more save kernel
    launches. Each agent's loss and gradient are the same either way. ``"auto"``: as many as keep one pass within
    about 8M hidden activations (the models' layer widths times the mini-batch's samples), at least one. Has no effect
    on agents that share models or run one by one."""
    compile: bool | dict = False
    """*New.* Run the networks and the loss through ``torch.compile`` (one value for all agents): each group's networks
    as the agent calls them (a batched group's ``torch.vmap`` over its agents included) when acting and in every
    mini-batch's forward and backward pass, and the loss (``ppo_loss``; HAPPO's team critic's too); sampling,
    preprocessors, GAE and the optimiser step stay eager, and so do recurrent groups. True uses torch's defaults; a dict gives ``torch.compile``'s keyword arguments
    (``mode``, ``dynamic``, ``fullgraph``, ``backend``, ``options``), e.g. ``{"mode": "reduce-overhead"}`` for CUDA
    graphs on a GPU. The first rollout and update pay the compilation; checkpoints are unchanged. See the usage page,
    "Compiled path"."""

    def _normalize_expanded(self, possible_agents: list[str]) -> None:
        for uid in possible_agents:
            if not isinstance(self.learning_rate[uid], (tuple, list)):
                self.learning_rate[uid] = (self.learning_rate[uid], self.learning_rate[uid])
            scheduler = self.learning_rate_scheduler[uid]
            if isinstance(scheduler, (tuple, list)):
                first, second = (tuple(scheduler) + (None, None))[:2]
                if second is not None and second is not first:
                    raise ValueError(
                        "cfg.learning_rate_scheduler: a pair of different schedulers is not supported (one optimiser "
                        "updates both models of a group); give one scheduler class"
                    )
                self.learning_rate_scheduler[uid] = first
            kwargs = self.learning_rate_scheduler_kwargs[uid]
            if isinstance(kwargs, (tuple, list)):
                self.learning_rate_scheduler_kwargs[uid] = dict(kwargs[0]) if kwargs else {}

    def validate(self, *, owner: str = "agent") -> bool:
        """Check the value ranges; raise a ValueError naming the field and the accepted range."""
        check_choice(owner, "non_finite", self.non_finite, ("raise", "skip"))
        if isinstance(self.rollouts, bool) or not isinstance(self.rollouts, int) or self.rollouts < 1:
            raise ValueError(f"{owner}: cfg.rollouts must be a positive integer, got {self.rollouts!r}")
        orders = self.mini_batch_order
        for order in orders.values() if isinstance(orders, dict) else [orders]:
            check_choice(owner, "mini_batch_order", order, ("shuffled", "sequential"))
        for name in ("learning_epochs", "mini_batches"):
            values = getattr(self, name)
            for v in values.values() if isinstance(values, dict) else [values]:
                if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                    raise ValueError(f"{owner}: cfg.{name} must be a positive integer, got {v!r}")
        check_range(owner, "discount_factor", self.discount_factor, low=0.0, high=1.0)
        check_range(owner, "gae_lambda", self.gae_lambda, low=0.0, high=1.0)
        check_range(owner, "learning_rate", self.learning_rate, low=0.0, low_open=True)
        check_range(owner, "ratio_clip", self.ratio_clip, low=0.0)
        for name in ("grad_norm_clip", "value_clip", "kl_threshold", "huber_delta", "value_loss_scale"):
            check_range(owner, name, getattr(self, name), low=0.0)
        check_range(owner, "entropy_loss_scale", self.entropy_loss_scale)
        choices = {"grad_norm_clip_mode": ("joint", "separate"), "advantage_standardization": ("per_agent", "pooled")}
        for name, allowed in choices.items():
            values = getattr(self, name)
            for value in values.values() if isinstance(values, dict) else [values]:
                check_choice(owner, name, value, allowed)
        eps = self.optimizer_eps
        for value in eps.values() if isinstance(eps, dict) else [eps]:
            if value is not None:
                check_range(owner, "optimizer_eps", value, low=0.0, low_open=True)
        unclipped = self.log_prob_of_unclipped_actions
        for value in unclipped.values() if isinstance(unclipped, dict) else [unclipped]:
            if not isinstance(value, bool):
                raise ValueError(f"{owner}: cfg.log_prob_of_unclipped_actions must be True or False, got {value!r}")
        if not (isinstance(self.batch_agent_models, bool) or self.batch_agent_models == "auto"):
            raise ValueError(
                f"{owner}: cfg.batch_agent_models must be True, False or 'auto', got {self.batch_agent_models!r}"
            )
        at_once = self.update_agents_at_once
        if at_once != "auto" and (isinstance(at_once, bool) or not isinstance(at_once, int) or at_once < 1):
            raise ValueError(
                f"{owner}: cfg.update_agents_at_once must be a positive integer or 'auto', got {at_once!r}"
            )
        compile_options(self.compile, owner=owner)
        if self.rewards_shaper is not None and not callable(self.rewards_shaper):
            raise ValueError(f"{owner}: cfg.rewards_shaper must be callable or None, got {self.rewards_shaper!r}")
        return True


@dataclasses.dataclass(kw_only=True)
class MAPPO_CFG(OnPolicyCfg):
    """Configuration of :class:`MAPPO` (the fields of :class:`OnPolicyCfg`)."""


@dataclasses.dataclass(kw_only=True)
class IPPO_CFG(OnPolicyCfg):
    """Configuration of :class:`IPPO` (the fields of :class:`OnPolicyCfg`)."""
