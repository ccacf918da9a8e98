"""The ``skrl-marl`` command (also ``python -m skrl_marl_ext``): train and evaluate with skrl's trainer.

``skrl-marl train`` builds an env from a spec (``vmas:balance`` by default), the agent from a YAML config in skrl's
Runner format (the package's default for ``--algo``, or ``--config``), trains with skrl's ``SequentialTrainer``
(tqdm progress bar, TensorBoard logs and checkpoints in the run directory), then writes ``run.json`` (what ``eval``
needs to rebuild env and agent), ``episodes.csv`` (every finished episode's return per agent) and
``learning_curve.png``. ``skrl-marl train --resume RUN_DIR`` continues such a run from its newest checkpoint, with
the run's own config, into the same folder. ``skrl-marl eval --checkpoint PATH`` runs deterministic episodes and prints
the returns.

``SECTION.KEY=VALUE`` arguments after the options of ``train`` override the config, as BenchMARL and Hydra users
type them (``agent.learning_rate=1e-3 models.policy.hidden_sizes=[256,256]``, values read as YAML).

Under ``torchrun`` the process group must exist before skrl is imported, so this package imports skrl only inside
functions (and ``import skrl_marl_ext`` imports it only on first use).

Bad input (unknown algo, env, scenario, a missing extra, a bad override) ends with one line on stderr and exit
status 2.

Modules, one job each:

- :mod:`.parser`: the argument parser of ``train``, ``eval`` and ``export``;
- :mod:`.config`: the Runner config of a new run (YAML, overrides, env arguments, what the options set);
- :mod:`.build`: env and Runner, and their errors as one-line usage errors;
- :mod:`.training`: ``train`` and its ``torchrun`` set-up; :mod:`.resume`: ``train --resume``;
- :mod:`.run_folder`: ``run.json``, ``episodes.csv``, the learning curve, the summary line;
- :mod:`.evaluation`: ``eval`` and ``export``; :mod:`.errors`: how the command fails.
"""

from __future__ import annotations

import sys

import torch

from skrl_marl_ext import distributed
from skrl_marl_ext.cli.errors import RanksDisagree, UsageError
from skrl_marl_ext.cli.evaluation import evaluate, export
from skrl_marl_ext.cli.parser import make_parser, typed_options
from skrl_marl_ext.cli.training import setup_torchrun, train

__all__ = ["main", "make_parser"]


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``skrl-marl``; returns the exit status (2 on bad input, 1 when distributed ranks disagree)."""
    args = make_parser().parse_args(argv)
    threads = torch.get_num_threads()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    created, finished = False, False
    try:
        created = setup_torchrun(args)
        if args.command == "train":
            args.given = typed_options(argv if argv is not None else sys.argv[1:])
            train(args)
        elif args.command == "export":
            export(args)
        else:
            evaluate(args)
        finished = True
    except UsageError as e:
        print(f"skrl-marl {args.command}: error: {e}", file=sys.stderr)
        return 2
    except RanksDisagree as e:
        finished = True
        print(f"skrl-marl {args.command}: error: {e}", file=sys.stderr)
        return 1
    finally:
        torch.set_num_threads(threads)  # main() may run inside another program (the tests)
        if created:  # a rank that failed leaves at once: waiting for the others could hang
            distributed.shutdown_torchrun_group(wait=finished)
    return 0
