"""The cost of one off-policy gradient step: ms per step of this package's MADDPG, MASAC and HASAC against HARL's
MADDPG and HASAC (PKU-MARL/HARL, its code in ``.harl/`` at the repository root) at HARL's tuned HalfCheetah-2x3
config, on this CPU, in one run.

Every implementation gets the same problem: 2 agents with observations of 11 and actions of 3 (MaMuJoCo
HalfCheetah-2x3, ``agent_obsk=0``), a state of 17, policies and critics of 256 x 256 ReLU units (the policies' last
hidden layer tanh, as HARL's ``final_activation_func``), batches of 1000 drawn from a replay of ``--rows`` random
transitions, one-step targets (HARL's ``n_step`` 1), no gradient clipping, no input normalisation. HARL's step is its
runner's ``train()`` over its own buffer (``OffPolicyBufferEP``, sampling included, as ours samples its replay);
ours is the agent's ``update()``. Both are timed in CPU time of this process (``time.process_time``) over ``--steps``
steps after ``--warmup``, with ``--threads`` torch threads: on a shared machine the CPU time is what other processes
do not inflate.

- ``maddpg``: ours, a critic per agent (the per-agent critics cost a second critic's forward and backward), the
  agents' models stacked (``batch_agent_models``); ``maddpg-loop``: one by one;
- ``maddpg-team``: ours with one team critic, HARL's MADDPG config (the same critic objects for both agents), the
  policies stacked; ``maddpg-team-loop``: one by one;
- ``hasac``: ours, one team critic (HARL's), the policies stacked; ``hasac-loop``: one by one;
- ``masac``: ours, one team critic, every policy stepped at once;
- ``harl-maddpg``, ``harl-hasac``: HARL's;
- ``benchmarl-maddpg``, ``benchmarl-masac``: BenchMARL 1.5.2's (TorchRL's DDPG and SAC losses over one group of
  both agents, its configs: one critic shared by the group, a policy per agent), where ``--benchmarl`` holds it.

Usage (the table of ``docs/results/offpolicy_step.md``)::

    python benchmarks/offpolicy_step.py --steps 40 --out docs/results/data/offpolicy_step.csv
    python benchmarks/offpolicy_step.py --steps 10 --profile hasac,harl-hasac   # where the time goes
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import statistics
import sys
import time
import types

import gymnasium
import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HARL_DIR = os.path.join(REPO, ".harl")
UIDS = ["agent_0", "agent_1"]
OBS, STATE, ACTIONS, HIDDEN, BATCH = 11, 17, 3, (256, 256), 1000
HARL = {
    "hidden_sizes": list(HIDDEN),
    "activation_func": "relu",
    "final_activation_func": "tanh",
    "polyak": 0.005,
    "gamma": 0.99,
    "use_proper_time_limits": True,
    "n_step": 1,
    "batch_size": BATCH,
    "use_policy_active_masks": True,
    "use_huber_loss": False,
    "huber_delta": 10.0,
}
"""HARL's tuned HalfCheetah-v2-2x3 values (MADDPG: lr 5e-4, critic_lr 1e-3, expl_noise 0.1; HASAC: lr and critic_lr
1e-3, auto_alpha, alpha_lr 3e-4), one-step targets."""
IMPLEMENTATIONS = (
    "maddpg",
    "maddpg-loop",
    "maddpg-team",
    "maddpg-team-loop",
    "hasac",
    "hasac-loop",
    "masac",
    "harl-maddpg",
    "harl-hasac",
    "benchmarl-maddpg",
    "benchmarl-masac",
)


def spaces():
    obs = {u: gymnasium.spaces.Box(-np.inf, np.inf, (OBS,), np.float32) for u in UIDS}
    states = {u: gymnasium.spaces.Box(-np.inf, np.inf, (STATE,), np.float32) for u in UIDS}
    actions = {u: gymnasium.spaces.Box(-1.0, 1.0, (ACTIONS,), np.float32) for u in UIDS}
    return obs, states, actions


def transitions(rows: int, seed: int = 0) -> dict:
    """``rows`` random joint transitions (the same for every implementation)."""
    g = torch.Generator().manual_seed(seed)
    return {
        "states": torch.randn(rows, STATE, generator=g),
        "next_states": torch.randn(rows, STATE, generator=g),
        "observations": [torch.randn(rows, OBS, generator=g) for _ in UIDS],
        "next_observations": [torch.randn(rows, OBS, generator=g) for _ in UIDS],
        "actions": [torch.rand(rows, ACTIONS, generator=g) * 2 - 1 for _ in UIDS],
        "rewards": torch.randn(rows, 1, generator=g),
        "terminated": torch.rand(rows, 1, generator=g) < 0.001,
        "truncated": torch.rand(rows, 1, generator=g) < 0.001,
    }


# ---------------------------------------------------------------------------------------------------- ours


def ours(name: str, data: dict):
    """Our agent, its replay holding ``data``: returns the function that takes one gradient step."""
    from skrl.memories.torch import RandomMemory

    from skrl_marl_ext import HASAC, MADDPG, MASAC, joint_action_space
    from skrl_marl_ext.models import QMLP, DeterministicMLP, SquashedGaussianMLP

    obs, states, actions = spaces()
    joint = joint_action_space(actions, UIDS)
    rows = data["states"].shape[0]
    algo, loop = name.split("-")[0], name.endswith("-loop")

    def critic():
        return QMLP(state_space=states[UIDS[0]], action_space=joint, hidden_sizes=HIDDEN, activation="relu")

    common = {"batch_size": BATCH, "gradient_steps": 1, "discount_factor": 0.99, "polyak": 0.005}
    common.update(grad_norm_clip=0.0, time_limit_bootstrap=True, batch_agent_models=not loop)
    common["experiment"] = {"write_interval": 0, "checkpoint_interval": 0}
    if algo == "maddpg":

        def policy(u):
            return DeterministicMLP(observation_space=obs[u], action_space=actions[u], hidden_sizes=HIDDEN)

        models = {
            u: {"policy": policy(u), "target_policy": policy(u), "critic": critic(), "target_critic": critic()}
            for u in UIDS
        }
        if "-team" in name:  # every agent given the first agent's critics: one team critic
            team = {role: models[UIDS[0]][role] for role in ("critic", "target_critic")}
            models = {u: {**m, **team} for u, m in models.items()}
        cls, cfg = MADDPG, {**common, "actor_learning_rate": 5e-4, "critic_learning_rate": 1e-3}
    else:
        team = {role: critic() for role in ("critic", "critic_2", "target_critic", "target_critic_2")}

        def policy(u):
            return SquashedGaussianMLP(
                observation_space=obs[u], action_space=actions[u], hidden_sizes=HIDDEN, final_activation="tanh"
            )

        models = {u: {"policy": policy(u), **team} for u in UIDS}
        cls = MASAC if algo == "masac" else HASAC
        cfg = {**common, "actor_learning_rate": 1e-3, "critic_learning_rate": 1e-3, "temperature_learning_rate": 3e-4}
    agent = cls(
        possible_agents=UIDS,
        models=models,
        memories={u: RandomMemory(memory_size=1, num_envs=rows) for u in UIDS},
        observation_spaces=obs,
        state_spaces=states,
        action_spaces=actions,
        device="cpu",
        cfg=cfg,
    )
    agent.init()
    agent.enable_training_mode(True)
    per_agent = {k: dict(zip(UIDS, data[k], strict=True)) for k in ("observations", "next_observations", "actions")}
    agent.record_transition(
        observations=per_agent["observations"],
        states=dict.fromkeys(UIDS, data["states"]),
        actions=per_agent["actions"],
        rewards=dict.fromkeys(UIDS, data["rewards"]),
        next_observations=per_agent["next_observations"],
        next_states=dict.fromkeys(UIDS, data["next_states"]),
        terminated=dict.fromkeys(UIDS, data["terminated"]),
        truncated=dict.fromkeys(UIDS, data["truncated"]),
        infos={},
        timestep=0,
        timesteps=1,
    )
    for uid in UIDS:  # what post_interaction sets around its gradient steps
        for role in ("policy", "critic"):
            agent.models[uid][role].enable_training_mode(True)
    return lambda: agent.update(timestep=0, timesteps=1, uid=UIDS[0])


# ---------------------------------------------------------------------------------------------------- HARL


def import_harl():
    sys.modules.setdefault("setproctitle", types.ModuleType("setproctitle"))
    if HARL_DIR not in sys.path:
        sys.path.insert(0, HARL_DIR)
    import harl.algorithms.actors as actors
    import harl.algorithms.critics as critics
    from harl.common.buffers.off_policy_buffer_ep import OffPolicyBufferEP
    from harl.runners.off_policy_ha_runner import OffPolicyHARunner
    from harl.runners.off_policy_ma_runner import OffPolicyMARunner

    return actors, critics, OffPolicyBufferEP, OffPolicyHARunner, OffPolicyMARunner


def harl(name: str, data: dict):
    """HARL's runner over its buffer holding ``data``: returns the function that takes one gradient step
    (``runner.train()``)."""
    actors, critics, buffer_class, ha_runner, ma_runner = import_harl()
    obs, states, actions = spaces()
    algo = name.removeprefix("harl-")
    rows = data["states"].shape[0]
    if algo == "maddpg":
        args = {**HARL, "lr": 5e-4, "critic_lr": 1e-3, "expl_noise": 0.1}
        actor_list = [actors.MADDPG(args, obs[u], actions[u]) for u in UIDS]
        critic = critics.ContinuousQCritic(args, states[UIDS[0]], [actions[u] for u in UIDS], len(UIDS), "EP")
        runner = ma_runner.__new__(ma_runner)
    else:
        args = {**HARL, "lr": 1e-3, "critic_lr": 1e-3, "auto_alpha": True, "alpha_lr": 3e-4}
        actor_list = [actors.HASAC(args, obs[u], actions[u]) for u in UIDS]
        critic = critics.SoftTwinContinuousQCritic(args, states[UIDS[0]], [actions[u] for u in UIDS], len(UIDS), "EP")
        runner = ha_runner.__new__(ha_runner)
    buffer = buffer_class(
        {"buffer_size": rows, "batch_size": BATCH, "n_step": 1, "n_rollout_threads": 20, "gamma": 0.99},
        states[UIDS[0]],
        len(UIDS),
        [obs[u] for u in UIDS],
        [actions[u] for u in UIDS],
    )
    done = (data["terminated"] | data["truncated"]).numpy()
    buffer.insert(
        (
            data["states"].numpy(),
            [o.numpy() for o in data["observations"]],
            [a.numpy() for a in data["actions"]],
            None,
            data["rewards"].numpy(),
            done,
            [np.ones((rows, 1), np.float32) for _ in UIDS],
            data["terminated"].numpy(),
            data["next_states"].numpy(),
            [o.numpy() for o in data["next_observations"]],
            None,
        )
    )
    log_alpha = [torch.zeros(1, requires_grad=True) for _ in UIDS]
    runner.__dict__.update(
        total_it=0,
        buffer=buffer,
        critic=critic,
        actor=actor_list,
        num_agents=len(UIDS),
        args={"algo": algo},
        algo_args={"algo": {"use_policy_active_masks": True, "auto_alpha": True}},
        policy_freq=1,
        state_type="EP",
        fixed_order=algo == "maddpg",
        device=torch.device("cpu"),
        value_normalizer=None,
        target_entropy=[-ACTIONS for _ in UIDS],
        log_alpha=log_alpha,
        alpha_optimizer=[torch.optim.Adam([a], lr=3e-4) for a in log_alpha],
        alpha=[torch.exp(a.detach()) for a in log_alpha],
    )
    return runner.train


# ---------------------------------------------------------------------------------------------------- BenchMARL


def benchmarl(name: str, data: dict, folder: str):
    """BenchMARL's MADDPG or MASAC loss, optimisers, target updater and replay buffer for one group of both agents,
    as its ``Experiment`` builds them, and its ``_optimizer_loop`` written out: returns the function that takes one
    gradient step. BenchMARL's own configs but the problem's sizes, batch, learning rate 1e-3, no gradient clip."""
    if folder not in sys.path:
        sys.path.insert(0, folder)
    from benchmarl.algorithms import MaddpgConfig, MasacConfig
    from benchmarl.experiment import ExperimentConfig
    from benchmarl.models import MlpConfig
    from tensordict import TensorDict
    from torchrl.data import Bounded, Composite, Unbounded

    config = ExperimentConfig.get_from_yaml()
    config.lr, config.clip_grad_norm, config.off_policy_train_batch_size = 1e-3, False, BATCH
    config.off_policy_memory_size = data["states"].shape[0]
    model = MlpConfig(num_cells=list(HIDDEN), activation_class=torch.nn.ReLU, layer_class=torch.nn.Linear)
    n = len(UIDS)
    group = "agents"
    experiment = types.SimpleNamespace(
        config=config,
        model_config=model,
        critic_model_config=model,
        on_policy=False,
        group_map={group: UIDS},
        observation_spec=Composite({group: Composite({"observation": Unbounded((n, OBS))}, shape=(n,))}),
        action_spec=Composite({group: Composite({"action": Bounded(-1.0, 1.0, (n, ACTIONS))}, shape=(n,))}),
        state_spec=Composite({"state": Unbounded((STATE,))}),
        action_mask_spec=None,
    )
    algorithm_config = (MasacConfig if name.endswith("masac") else MaddpgConfig).get_from_yaml()
    experiment.algorithm_config = algorithm_config
    algorithm = algorithm_config.get_algorithm(experiment=experiment)
    loss, updater = algorithm.get_loss_and_updater(group)
    optimizers = {
        key: torch.optim.Adam(params, lr=config.lr, eps=config.adam_eps)
        for key, params in algorithm.get_parameters(group).items()
    }
    buffer = algorithm.get_replay_buffer(group=group, transforms=[])
    rows = data["states"].shape[0]
    done = data["terminated"] | data["truncated"]
    agents = TensorDict(
        {"observation": torch.stack(data["observations"], dim=1), "action": torch.stack(data["actions"], dim=1)},
        batch_size=[rows, n],
    )
    nxt = {
        group: TensorDict({"observation": torch.stack(data["next_observations"], dim=1)}, batch_size=[rows, n]),
        "state": data["next_states"],
        "reward": data["rewards"],
        "done": done,
        "terminated": data["terminated"],
    }
    batch = TensorDict({group: agents, "state": data["states"], "next": nxt}, batch_size=[rows])
    buffer.extend(algorithm.process_batch(group, batch))

    def step():
        subdata = buffer.sample()
        values = algorithm.process_loss_vals(group, loss(subdata))
        for key, value in values.items():
            if key in optimizers:
                value.backward()
                optimizers[key].step()
                optimizers[key].zero_grad()
        updater.step()

    return step


# ---------------------------------------------------------------------------------------------------- the run


def measure(steps: dict, *, rounds: int, per_round: int, warmup: int) -> dict[str, list[float]]:
    """CPU ms of each gradient step of every implementation, taken round-robin (``rounds`` rounds of ``per_round``
    steps each, after ``warmup`` steps), so that a change in the machine's load reaches them all alike."""
    times: dict[str, list[float]] = {name: [] for name in steps}
    for step in steps.values():
        for _ in range(warmup):
            step()
    for _ in range(rounds):
        for name, step in steps.items():
            for _ in range(per_round):
                start = time.process_time()
                step()
                times[name].append((time.process_time() - start) * 1000.0)
    return times


def profile(name: str, step, *, steps: int) -> str:
    """torch's profiler over ``steps`` steps: the ops by CPU time of their own."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    return f"== {name}\n" + prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--impls", default=",".join(IMPLEMENTATIONS), help="which of " + ", ".join(IMPLEMENTATIONS))
    parser.add_argument("--steps", type=int, default=40, help="steps timed per implementation")
    parser.add_argument("--rounds", type=int, default=4, help="the steps in this many round-robin rounds")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rows", type=int, default=100_000, help="transitions in every replay")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--profile", default="", help="implementations to profile (comma-separated)")
    parser.add_argument("--out", default="", help="write the table here (docs/results/make_tables.py's format)")
    parser.add_argument(
        "--benchmarl",
        default=os.path.join(REPO, ".benchmarl"),
        help="a folder holding BenchMARL 1.5.2 with torchrl 0.11.1 and tensordict 0.11.0 (pip install --no-deps "
        "--target FOLDER benchmarl==1.5.2 torchrl==0.11.1 tensordict==0.11.0 pyvers)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    names = [n for n in args.impls.split(",") if n]
    unknown = sorted(set(names) - set(IMPLEMENTATIONS))
    if unknown:
        parser.error(f"unknown implementations {unknown}; choose from {', '.join(IMPLEMENTATIONS)}")
    have_harl = os.path.isfile(os.path.join(HARL_DIR, "harl", "runners", "off_policy_ha_runner.py"))
    data = transitions(args.rows)
    steps = {}
    for name in names:
        if name.startswith("harl-") and not have_harl:
            print(f"{name}: HARL's code is not in {HARL_DIR}; skipped")
            continue
        if name.startswith("benchmarl-") and not os.path.isdir(os.path.join(args.benchmarl, "benchmarl")):
            print(f"{name}: BenchMARL is not in {args.benchmarl}; skipped")
            continue
        torch.manual_seed(0)
        if name.startswith("harl-"):
            steps[name] = harl(name, data)
        elif name.startswith("benchmarl-"):
            steps[name] = benchmarl(name, data, args.benchmarl)
        else:
            steps[name] = ours(name, data)
    per_round = max(1, args.steps // args.rounds)
    times = measure(steps, rounds=args.rounds, per_round=per_round, warmup=args.warmup)
    rows = []
    for name, taken in times.items():
        median, mean = statistics.median(taken), statistics.fmean(taken)
        rows.append((name, median, mean, min(taken)))
        print(
            f"{name:16s} median {median:7.1f} ms   mean {mean:7.1f}   min {min(taken):7.1f}  (CPU, {len(taken)} steps)"
        )
    for name in args.profile.split(","):
        if name in steps:
            print(profile(name, steps[name], steps=10))
    if args.out:
        command = "python benchmarks/offpolicy_step.py " + " ".join(argv if argv is not None else sys.argv[1:])
        lines = [
            f"# command: {command}",
            f"# machine: {platform.processor() or platform.machine()}, {args.threads} torch thread(s), torch "
            f"{torch.__version__}",
            f"# date: {datetime.date.today().isoformat()}",
            "# note: CPU ms of one gradient step (batch 1000, 2 agents, 256x256 models), median over the steps",
            "implementation,median ms,mean ms,min ms",
            *(f"{n},{m:.1f},{a:.1f},{lo:.1f}" for n, m, a, lo in rows),
        ]
        with open(args.out, "w") as file:
            file.write("\n".join(lines) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(main())
