"""What the benchmark scripts share: envs, models, agents (ours and skrl's built-in) and a timed training loop.

Both agents get the same env, the same model classes and sizes, the same seed and the same configuration; only the
agent class differs. Training steps through :func:`skrl_marl_ext.trainers.interact`, the loop of skrl's
``Trainer.train`` for one multi-agent (and of our ``StepTrainer``), so what is timed is what a user's training run
does. One rollout and its update run untimed first.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

import torch
from skrl.memories.torch import RandomMemory
from skrl.trainers.torch import SequentialTrainer

from skrl_marl_ext.models import GaussianMLP, ValueMLP
from skrl_marl_ext.trainers import PHASES, interact, track_phase_times

ALGOS = ("ours-mappo", "skrl-mappo", "ours-ippo", "skrl-ippo", "ours-happo")
BASELINE = {"ours-mappo": "skrl-mappo", "ours-ippo": "skrl-ippo", "ours-happo": "ours-mappo"}
"""The agent each of ours is compared with: skrl's own, or for HAPPO (which skrl lacks) our MAPPO."""


@dataclass
class TrainCfg:
    """What every agent of a benchmark shares."""

    rollouts: int = 100
    epochs: int = 4
    minibatches: int = 4
    learning_rate: float = 3e-4
    hidden: tuple[int, ...] = (256, 256)
    activation: str = "tanh"
    kl_threshold: float = 0.0
    """With a value above 0: skrl's ``KLAdaptiveLR`` with this ``kl_threshold`` (Isaac Lab's configs: 0.008)."""


def make_env(spec: str, *, num_envs: int, agents: int | None, device: str, seed: int = 0):
    """``builtin:spread``, ``null`` or ``vmas:<scenario>`` as a skrl multi-agent env wrapper."""
    if spec == "null":
        from skrl_marl_ext.envs.null import make_null_env

        return make_null_env(num_envs=num_envs, num_agents=agents or 4, device=device, seed=seed)
    if spec == "builtin:spread":
        from skrl_marl_ext.envs import make_spread_env

        return make_spread_env(num_envs=num_envs, num_agents=agents or 3, device=device, seed=seed)
    if spec.startswith("vmas:"):
        from skrl_marl_ext.envs.vmas_env import make_vmas_env

        kwargs = {"n_agents": agents} if agents else {}
        return make_vmas_env(spec[5:], num_envs=num_envs, device=device, seed=seed, **kwargs)
    raise ValueError(f"unknown env '{spec}': use builtin:spread, null or vmas:<scenario> (e.g. vmas:balance)")


def make_models(env, *, algo: str, shared: bool, cfg: TrainCfg, device: str) -> dict:
    """Gaussian policy and value MLPs per agent (one pair for all agents when ``shared``)."""
    critic_input = "observations" if algo.endswith("ippo") else "states"

    def pair(uid):
        kwargs = {"hidden_sizes": cfg.hidden, "activation": cfg.activation, "device": device}
        return {
            "policy": GaussianMLP(
                observation_space=env.observation_spaces[uid], action_space=env.action_spaces[uid], **kwargs
            ),
            "value": ValueMLP(
                observation_space=env.observation_spaces[uid],
                state_space=env.state_spaces[uid],
                input=critic_input,
                **kwargs,
            ),
        }

    if shared:
        models = pair(env.possible_agents[0])
        return {uid: models for uid in env.possible_agents}
    return {uid: pair(uid) for uid in env.possible_agents}


def make_agent(algo: str, env, *, shared: bool, cfg: TrainCfg, device: str, seed: int = 0, ours_cfg=None):
    """One of :data:`ALGOS` on ``env``, models seeded with ``seed``; ``ours_cfg`` adds config fields of ours."""
    if shared and algo.startswith("skrl"):
        raise ValueError("--shared applies to ours only: skrl's MAPPO/IPPO cannot group agents")
    torch.manual_seed(seed)
    models = make_models(env, algo=algo, shared=shared, cfg=cfg, device=device)
    spaces = {
        "possible_agents": env.possible_agents,
        "models": models,
        "observation_spaces": env.observation_spaces,
        "state_spaces": env.state_spaces,
        "action_spaces": env.action_spaces,
        "device": device,
    }
    common = {
        "rollouts": cfg.rollouts,
        "learning_epochs": cfg.epochs,
        "mini_batches": cfg.minibatches,
        "learning_rate": cfg.learning_rate,
    }
    scheduler_kwargs = {"kl_threshold": cfg.kl_threshold} if cfg.kl_threshold else {}
    if cfg.kl_threshold:
        from skrl.resources.schedulers.torch import KLAdaptiveLR

        common["learning_rate_scheduler"] = KLAdaptiveLR
    if algo.startswith("ours"):
        from skrl_marl_ext import HAPPO, IPPO, MAPPO

        cls = {"ours-mappo": MAPPO, "ours-ippo": IPPO, "ours-happo": HAPPO}[algo]
        quiet = {"experiment": {"write_interval": 0, "checkpoint_interval": 0}}
        ours = {**common, "learning_rate_scheduler_kwargs": scheduler_kwargs, **quiet, **(ours_cfg or {})}
        return cls(cfg=ours, **spaces)
    if algo == "skrl-mappo":
        from skrl.multi_agents.torch.mappo import MAPPO as cls
        from skrl.multi_agents.torch.mappo import MAPPO_CFG as cfg_cls
    elif algo == "skrl-ippo":
        from skrl.multi_agents.torch.ippo import IPPO as cls
        from skrl.multi_agents.torch.ippo import IPPO_CFG as cfg_cls
    else:
        raise ValueError(f"unknown algo '{algo}'; choose from {', '.join(ALGOS)}")
    from skrl.multi_agents.torch.base import ExperimentCfg

    uids = env.possible_agents
    # skrl 2.1.1's cfg.expand rejects the empty-dict defaults of the *_kwargs fields: give them per agent
    per_agent = {
        name: {uid: dict(scheduler_kwargs) if name == "learning_rate_scheduler_kwargs" else {} for uid in uids}
        for name in (
            "learning_rate_scheduler_kwargs",
            "observation_preprocessor_kwargs",
            "state_preprocessor_kwargs",
            "value_preprocessor_kwargs",
        )
    }
    skrl_cfg = cfg_cls(
        **common, **per_agent, experiment=ExperimentCfg(write_interval=0, checkpoint_interval=0, directory="/tmp")
    )
    memories = {uid: RandomMemory(memory_size=cfg.rollouts, num_envs=env.num_envs, device=device) for uid in uids}
    return cls(cfg=skrl_cfg, memories=memories, **spaces)


def train_frames_per_second(agent, env, *, timesteps: int, warmup: int, phase_ms: dict | None = None) -> float:
    """Train ``warmup`` steps untimed, then ``timesteps`` timed; return env frames per second.

    An env frame is one step of one env (all agents act once): ``num_envs * timesteps`` frames.
    Each step is :func:`skrl_marl_ext.trainers.interact`, the step of our ``StepTrainer`` and the loop of skrl's
    ``Trainer.train`` for one multi-agent, with skrl's inference and env-stepping timers tracked as there.

    :param phase_ms: If given, filled with the mean milliseconds per timed step of each of
        :data:`skrl_marl_ext.trainers.PHASES` (``post_interaction`` holds the updates, amortised).
    """
    total = warmup + timesteps
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": total, "headless": True, "disable_progressbar": True})
    agent.enable_training_mode(True)
    track = track_phase_times(agent)
    timed = dict.fromkeys(PHASES, 0.0)
    timing = False  # read by on_phase when it is called (closures see the variable, not its value at definition)

    def on_phase(phase: str, milliseconds: float) -> None:
        track(phase, milliseconds)
        if timing:
            timed[phase] += milliseconds

    observations, _ = env.reset()
    states = env.state()
    start = None
    cuda = torch.device(env.device).type == "cuda"
    for timestep in range(total):
        if timestep == warmup:
            if cuda:  # the untimed steps' kernels finish before the clock starts, the timed ones before it stops
                torch.cuda.synchronize()
            start, timing = time.perf_counter(), True
        step = interact(agent, env, observations, states, timestep=timestep, timesteps=total, on_phase=on_phase)
        observations, states = step.next_observations, step.next_states
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    if phase_ms is not None:
        phase_ms.update({phase: total_ms / timesteps for phase, total_ms in timed.items()})
    return env.num_envs * timesteps / seconds


def env_frames_per_second(env, *, timesteps: int) -> float:
    """Env alone with uniform random actions: env frames per second (one untimed step first)."""
    env.reset()

    def random_actions():
        return {
            uid: torch.rand((env.num_envs, *env.action_spaces[uid].shape), device=env.device) * 2 - 1
            for uid in env.possible_agents
        }

    env.step(random_actions())
    env.state()
    start = time.perf_counter()
    for _ in range(timesteps):
        env.step(random_actions())
        env.state()
    return env.num_envs * timesteps / (time.perf_counter() - start)


def model_macs(agent) -> int:
    """Multiply-adds per input row of one forward pass of one agent's policy and value model (their Linear layers).

    Agents of skrl's and of this package's agents have equally sized models, so the first agent's models stand for
    every agent.
    """
    uid = agent.possible_agents[0]
    models = {id(agent.models[uid][role]): agent.models[uid][role] for role in ("policy", "value")}
    return sum(
        m.in_features * m.out_features
        for model in models.values()
        for m in model.modules()
        if isinstance(m, torch.nn.Linear)
    )


def flops_per_env_step(agent, *, num_envs: int, epochs: int) -> float:
    """Floating-point operations that the models need per env step, updates amortised over the rollout.

    Each sample gets one forward pass of policy and value when acting (``2 * MACs``) and, per learning epoch, one
    forward and one backward pass (about ``3 * 2 * MACs``: the backward pass has two matrix products per layer).
    Elementwise work (activations, losses, Adam) is left out, so this is a lower bound.
    """
    macs = model_macs(agent)
    return num_envs * len(agent.possible_agents) * 2 * macs * (1 + 3 * epochs)


def matmul_flops_per_second(*, rows: int = 4096, width: int = 256, repeats: int = 20, device: str = "cpu") -> float:
    """Measured rate of a ``(rows, width) @ (width, width)`` float32 product, in FLOP/s (median of ``repeats``)."""
    a = torch.randn(rows, width, device=device)
    b = torch.randn(width, width, device=device)
    times = []
    for _ in range(repeats + 2):
        if device != "cpu":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        a @ b
        if device != "cpu":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return 2 * rows * width * width / statistics.median(times[2:])


def round_up(timesteps: int, rollouts: int) -> int:
    """``timesteps`` rounded up to whole rollouts, so every timed run does the same number of updates."""
    return max(rollouts, -(-timesteps // rollouts) * rollouts)


def median(values: list[float]) -> float:
    return statistics.median(values)


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function ``I_x(a, b)`` (its continued fraction, modified Lentz)."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    if x > (a + 1.0) / (a + b + 2.0):  # the fraction converges fast only below this point
        return 1.0 - _incomplete_beta(b, a, 1.0 - x)
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return math.exp(log_front) * fraction / a


def welch_test(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """Welch's t-test of two samples' means: ``(t, degrees of freedom, two-sided p)``.

    The same as ``scipy.stats.ttest_ind(a, b, equal_var=False)``, without scipy."""
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"Welch's t-test needs at least 2 values per sample, got {len(a)} and {len(b)}")
    # each mean and its squared standard error
    (mean_a, se2_a), (mean_b, se2_b) = ((statistics.fmean(s), statistics.variance(s) / len(s)) for s in (a, b))
    if se2_a + se2_b == 0.0:
        t = 0.0 if mean_a == mean_b else math.copysign(math.inf, mean_a - mean_b)
        return t, float(len(a) + len(b) - 2), float(mean_a == mean_b)
    t = (mean_a - mean_b) / math.sqrt(se2_a + se2_b)
    df = (se2_a + se2_b) ** 2 / (se2_a**2 / (len(a) - 1) + se2_b**2 / (len(b) - 1))
    return t, df, _incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


def markdown_table(header: list[str], rows: list[list]) -> str:
    """A GitHub markdown table (numbers as given, already formatted)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def parse_table(text: str) -> list[dict[str, str]]:
    """Rows of the first markdown table in ``text`` as dicts (for tests)."""
    lines = [line.strip() for line in text.splitlines() if line.strip().startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True)) for line in lines[2:]]


def run_json(arguments: list[str], *, env: dict | None = None) -> dict:
    """Run ``python ARGUMENTS`` in a fresh process (nothing of an earlier measurement alive in it) and read the last
    line it prints as JSON; a failure raises with the command and the tail of its stderr."""
    command = [sys.executable, *arguments]
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
