"""Worker for ``torchrun --nproc_per_node=N tests/torchrun_worker.py OUT_DIR ALGO``: CPU training in a gloo group.

skrl 2.1.1 calls ``init_process_group("nccl")`` at import when ``WORLD_SIZE > 1``, which cannot work on CPU, so the
variable is hidden while skrl is imported and the gloo group is created here (the pattern the README gives).
"""

import os
import sys

world_size = int(os.environ.pop("WORLD_SIZE"))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=world_size)
import skrl  # noqa: E402, F401  (imported with WORLD_SIZE hidden)

os.environ["WORLD_SIZE"] = str(world_size)

sys.path.insert(0, os.path.dirname(__file__))
from helpers import QUIET, make_agent, make_maddpg, make_maddpg_models, params, spread  # noqa: E402
from skrl.trainers.torch import SequentialTrainer  # noqa: E402

out_dir, algo = sys.argv[1], sys.argv[2]
rank = dist.get_rank()
torch.set_num_threads(1)
torch.manual_seed(rank)
env = spread(num_envs=4, num_agents=2, seed=rank)
if algo.startswith("maddpg"):  # maddpg-twin: clipped double Q with a policy delay (MATD3)
    twin = algo == "maddpg-twin"
    models = make_maddpg_models(env, twin=twin, team=algo == "maddpg-team")  # maddpg-team: one critic for the team
    agent = make_maddpg(env, models=models, cfg={"batch_size": 16, "policy_delay": 2 if twin else 1})
elif algo in ("masac", "hasac-team"):  # HASAC with one team critic, broadcast from rank 0 as the policies are
    from sac_helpers import HASAC, MASAC, make_sac

    agent = make_sac(env, {"batch_size": 16}, cls=MASAC if algo == "masac" else HASAC, team=algo == "hasac-team")
else:
    agent = make_agent(env, algo, cfg={"rollouts": 4, "learning_epochs": 2, "mini_batches": 2, "experiment": QUIET})
initial = torch.cat([params(m) for uid in env.possible_agents for m in agent.models[uid].values()])
SequentialTrainer(env=env, agents=agent, cfg={"timesteps": 16, "headless": True, "disable_progressbar": True}).train()
flat = torch.cat([params(m) for uid in env.possible_agents for m in agent.models[uid].values()])
torch.save({"initial": initial, "final": flat}, os.path.join(out_dir, f"rank{rank}.pt"))
dist.barrier()  # every rank done with its collectives before any tears the group down
dist.destroy_process_group()
