"""The README's learning table on the built-in spread env: MAPPO, IPPO and MADDPG, per seed.

The same runs as the learning tests (``tests/test_learning.py`` for MAPPO/IPPO, ``tests/test_maddpg_learning.py`` for MADDPG)
with the seed varied: train, then the mean return per agent of 25-step episodes acted deterministically (the
trainers' evaluation path, ``outputs["mean_actions"]``). On this env a random policy gets about -26.6, a zero action
-25.9, and walking straight to the goal about -6.0.

    python benchmarks/spread_learning.py --seeds 0,1,2
"""

from __future__ import annotations

import argparse

import torch
from skrl.memories.torch import RandomMemory
from skrl.trainers.torch import SequentialTrainer

from skrl_marl_ext import IPPO, MADDPG, MAPPO, joint_action_space
from skrl_marl_ext.envs import make_spread_env
from skrl_marl_ext.models import QMLP, CategoricalMLP, DeterministicMLP, GaussianMLP, ValueMLP
from skrl_marl_ext.trainers import mean_episode_return

QUIET = {"write_interval": 0, "checkpoint_interval": 0}
PPO_CFG = {"rollouts": 32, "learning_epochs": 4, "mini_batches": 4, "learning_rate": 3e-3, "experiment": QUIET}


def on_policy(algo: str, seed: int) -> float:
    """``tests/test_learning.py``: 3 agents, 64 envs, 2500 steps."""
    torch.manual_seed(seed)
    env = make_spread_env(num_envs=64, num_agents=3, seed=seed)
    models = {}
    for uid in env.possible_agents:
        spaces = {"observation_space": env.observation_space(uid), "state_space": env.state_space(uid)}
        policy = GaussianMLP(**spaces, action_space=env.action_space(uid), hidden_sizes=(64, 64), initial_log_std=-0.5)
        value = ValueMLP(**spaces, input="states" if algo == "mappo" else "observations", hidden_sizes=(64, 64))
        models[uid] = {"policy": policy, "value": value}
    agent = (MAPPO if algo == "mappo" else IPPO)(
        possible_agents=env.possible_agents,
        models=models,
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces,
        action_spaces=env.action_spaces,
        device=env.device,
        cfg=PPO_CFG,
    )
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 2500, "disable_progressbar": True}).train()
    return mean_episode_return(agent, env)


def maddpg(continuous: bool, seed: int) -> float:
    """``tests/test_maddpg_learning.py``: ``cfg={}``, 16 envs; 3 agents x 1500 steps (Box) or 2 agents x 1000 steps (Discrete)."""
    torch.manual_seed(seed)
    num_agents, steps = (3, 1500) if continuous else (2, 1000)
    env = make_spread_env(num_envs=16, num_agents=num_agents, continuous=continuous, seed=seed)
    joint = joint_action_space(env.action_spaces, env.possible_agents)
    policy_cls = DeterministicMLP if continuous else CategoricalMLP
    models = {}
    for uid in env.possible_agents:

        def policy(uid=uid):
            return policy_cls(
                observation_space=env.observation_space(uid), action_space=env.action_space(uid), hidden_sizes=(64, 64)
            )

        def critic(uid=uid):
            return QMLP(state_space=env.state_space(uid), action_space=joint, hidden_sizes=(64, 64))

        models[uid] = {"policy": policy(), "target_policy": policy(), "critic": critic(), "target_critic": critic()}
    agent = MADDPG(
        possible_agents=env.possible_agents,
        models=models,
        memories={uid: RandomMemory(memory_size=1000, num_envs=env.num_envs) for uid in env.possible_agents},
        observation_spaces=env.observation_spaces,
        state_spaces=env.state_spaces,
        action_spaces=env.action_spaces,
        device=env.device,
        cfg={"experiment": QUIET},
    )
    SequentialTrainer(env=env, agents=agent, cfg={"timesteps": steps, "disable_progressbar": True}).train()
    eval_env = make_spread_env(num_envs=128, num_agents=num_agents, continuous=continuous, seed=123)
    return mean_episode_return(agent, eval_env)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    seeds = [int(s) for s in args.seeds.split(",")]
    runs = {
        "MAPPO": lambda s: on_policy("mappo", s),
        "IPPO": lambda s: on_policy("ippo", s),
        "MADDPG (Box, 3 agents)": lambda s: maddpg(True, s),
        "MADDPG (Discrete, 2 agents)": lambda s: maddpg(False, s),
    }
    print("| algorithm | " + " | ".join(f"seed {s}" for s in seeds) + " |")
    print("|---|" + "---|" * len(seeds))
    for name, run in runs.items():
        print(f"| {name} | " + " | ".join(f"{run(s):.1f}" for s in seeds) + " |", flush=True)


if __name__ == "__main__":
    main()
