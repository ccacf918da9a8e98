"""Two CPU processes with a gloo group: the ranks see different data yet end with bitwise-identical parameters.

Each rank steps its own env seed, so without the gradient all-reduce (or the broadcast at construction) the
parameters would drift apart; the KL that drives ``KLAdaptiveLR`` is the rank mean, so the learning rates agree too.
Only rank 0 writes TensorBoard data and checkpoints.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from skrl.resources.schedulers.torch import KLAdaptiveLR
from skrl.trainers.torch import SequentialTrainer

pytestmark = pytest.mark.slow

WORLD = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, algo: str, out_dir: str, batched: bool = False) -> None:
    # imported here: the spawned process starts bare
    from helpers import make_agent, params, spread

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        torch.manual_seed(100 + rank)  # different initial weights per rank: the broadcast must fix that
        env = spread(num_envs=8, num_agents=3, seed=10 + rank)  # different data per rank
        cfg = {
            "rollouts": 8,
            "learning_epochs": 2,
            "mini_batches": 2,
            "learning_rate_scheduler": KLAdaptiveLR,
            "learning_rate_scheduler_kwargs": {"kl_threshold": 1e-6},
            "experiment": {"directory": out_dir, "experiment_name": f"rank{rank}", "write_interval": 8},
        }
        cfg["experiment"]["checkpoint_interval"] = 32
        if batched:  # each agent its own KL, rate and early stop: every rank must stop the same agents
            cfg.update(batch_agent_models=True, kl_threshold=0.004)
        agent = make_agent(env, algo, cfg=cfg)
        assert [g.batched for g in agent.groups] == ([True] if batched else [False] * 3)
        initial = torch.cat([params(m) for uid in env.possible_agents for m in agent.models[uid].values()])
        trainer_cfg = {"timesteps": 64, "headless": True, "disable_progressbar": True}
        SequentialTrainer(env=env, agents=agent, cfg=trainer_cfg).train()
        flat = torch.cat([params(m) for uid in env.possible_agents for m in agent.models[uid].values()])
        optimizers = [agent.checkpoint_modules[uid]["optimizer"].state_dict() for uid in env.possible_agents]
        lrs = torch.tensor([o["param_groups"][0]["lr"] for o in optimizers], dtype=torch.float64)
        torch.save({"initial": initial, "params": flat, "lrs": lrs}, os.path.join(out_dir, f"result{rank}.pt"))
        dist.barrier()  # every rank done with its collectives before any tears the group down
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("algo,batched", [("mappo", False), ("ippo", False), ("mappo", True)])
def test_gloo_ranks_agree_bitwise(algo, batched, tmp_path):
    mp.spawn(_worker, args=(_free_port(), algo, str(tmp_path), batched), nprocs=WORLD, join=True)
    results = [torch.load(tmp_path / f"result{r}.pt") for r in range(WORLD)]
    assert torch.equal(results[0]["initial"], results[1]["initial"])  # broadcast at construction
    assert not torch.equal(results[0]["initial"], results[0]["params"])  # and it trained
    assert torch.equal(results[0]["params"], results[1]["params"])
    assert torch.equal(results[0]["lrs"], results[1]["lrs"])
    # the scheduler did act (the KL is a rank mean, yet the rates fell from the initial 1e-3)
    assert (results[0]["lrs"] < 1e-3).all()
    # only rank 0 wrote anything
    rank0 = list((tmp_path / "rank0").rglob("*"))
    assert any(p.name.startswith("events.out") for p in rank0)
    assert any(p.suffix == ".pt" for p in rank0)
    assert not (tmp_path / "rank1").exists() or not [p for p in (tmp_path / "rank1").rglob("*") if p.is_file()]


@pytest.mark.parametrize("algo", ["mappo", "ippo", "maddpg", "maddpg-twin", "maddpg-team", "masac", "hasac-team"])
def test_torchrun_cpu_ranks_agree_bitwise(algo, tmp_path):
    """Once through ``torchrun`` itself (as a user launches it), four CPU processes."""
    worker = os.path.join(os.path.dirname(__file__), "torchrun_worker.py")
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=4", "--master_port", str(_free_port())]
    result = subprocess.run([*command, worker, str(tmp_path), algo], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    results = [torch.load(tmp_path / f"rank{r}.pt") for r in range(4)]
    assert not torch.equal(results[0]["initial"], results[0]["final"])  # it trained
    assert all(torch.equal(results[0]["final"], r["final"]) for r in results[1:])


@pytest.mark.parametrize("models", [[], ["--rnn", "gru", "--sequence-length", "4"]], ids=["mlp", "gru"])
def test_cli_train_under_torchrun_on_cpu(models, tmp_path):
    """``torchrun -m skrl_marl_ext train`` on CPU: the CLI creates the gloo group itself (skrl would ask for NCCL),
    the two ranks (envs seeded apart) end with the same parameters, and rank 0 alone writes the one run folder; with
    MLP and with recurrent (GRU) models."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port", str(_free_port())]
    train = ["-m", "skrl_marl_ext", "train", "--env", "builtin:spread", "--num-envs", "4", "--timesteps", "16"]
    overrides = ["agent.rollouts=8", "agent.learning_epochs=2", "agent.mini_batches=2"]  # two updates
    argv = [*command, *train, *models, "--out", str(tmp_path), "--no-progress", *overrides]
    result = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    summaries = [line for line in result.stdout.splitlines() if line.startswith("skrl-marl: trained")]
    assert len(summaries) == 1, result.stdout  # rank 0 only
    assert "for 128 frames" in summaries[0]  # 2 ranks x 4 envs x 16 steps
    assert "\n  2 ranks, parameters identical\n" in result.stdout, result.stdout
    (run_dir,) = list(tmp_path.iterdir())  # one run folder, nothing else in the working directory
    assert (run_dir / "checkpoints" / "final.pt").is_file()
    assert json.loads((run_dir / "run.json").read_text())["ranks"] == 2
