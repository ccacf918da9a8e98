"""The ``skrl-marl`` command (also ``python -m skrl_marl_ext``): train and evaluate with skrl's trainer.

``skrl-marl train`` builds an env from a spec (``vmas:balance`` by default), the agent from a YAML config in skrl's
Runner format (the package's default for ``--algo``, or ``--config``), and trains it through the steps of skrl's
``SequentialTrainer`` loop (tqdm progress bar, TensorBoard logs and checkpoints in a new run directory). It writes
``run.json`` (what ``eval`` and ``--resume`` need to rebuild env and agent) before the first step and at each
checkpoint, ``episodes.csv`` (every finished episode's return per agent) as episodes end, and at the end
``checkpoints/final.pt`` and ``learning_curve.png``. ``skrl-marl train --resume RUN_DIR`` continues such a run,
finished or not, from the checkpoint its ``run.json`` records, with the run's own config, into the same folder (one
process at a time). ``skrl-marl eval --checkpoint PATH`` runs deterministic episodes and prints the returns;
``skrl-marl export`` writes a file for skrl's own agents. ``skrl-marl isaaclab train|play`` runs Isaac Lab's own skrl
backends with this package's agents (:mod:`skrl_marl_ext.isaaclab`).

``SECTION.KEY=VALUE`` arguments after the options of ``train`` override the config, as BenchMARL and Hydra users
type them (``agent.learning_rate=1e-3 models.policy.hidden_sizes=[256,256]``, values read as YAML).

Under ``torchrun`` the process group must exist before skrl is imported, so this package imports skrl only inside
functions (and ``import skrl_marl_ext`` imports it only on first use).

Bad input (unknown algo, env, scenario, a missing extra, a bad override) ends with one line on stderr and exit
status 2; a fault while it runs (an input refused during training, a failed write) with one line and exit status 1;
Ctrl-C or SIGTERM during training with a checkpoint, one line and exit status 130 or 143. ``--debug`` adds the
traceback.

Modules, one job each:

- :mod:`.parser`: the argument parser of ``train``, ``eval`` and ``export``;
- :mod:`.config`: the Runner config of a new run (YAML, overrides, env arguments, what the options set);
- :mod:`.build`: env and Runner, and their errors as one-line usage errors;
- :mod:`.training`: ``train`` and its ``torchrun`` set-up; :mod:`.loop`: its loop over env steps (checkpoint hook,
  clean stop on a signal); :mod:`.resume`: ``train --resume``;
- :mod:`.run_folder`: ``run.json``, the learning curve, the summary, the run's lock; :mod:`.episodes`:
  ``episodes.csv``, appended as episodes end and read back in one pass;
- :mod:`.evaluation`: ``eval`` and ``export``; :mod:`.errors`: how the command fails.
"""

from __future__ import annotations

import sys
import traceback

import torch

from skrl_marl_ext import distributed
from skrl_marl_ext.cli.errors import RanksDisagree, Stopped, UsageError
from skrl_marl_ext.cli.evaluation import evaluate, export
from skrl_marl_ext.cli.parser import make_parser, typed_options
from skrl_marl_ext.cli.training import setup_torchrun, train

__all__ = ["main", "make_parser"]


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``skrl-marl``; returns the exit status: 2 on bad input, 1 on a fault while it runs (a refused
    input during training, a failed write, ranks that disagree), ``128 + signal`` for a run stopped by Ctrl-C or
    SIGTERM. Each error is one line on stderr (with the traceback under ``--debug``)."""
    given = sys.argv[1:] if argv is None else argv
    if given[:1] == ["isaaclab"]:  # Isaac Lab's options, parsed by Isaac Lab's backends
        from skrl_marl_ext.isaaclab import main as isaaclab_main

        return isaaclab_main(given[1:])
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
        return _fail(args, e, status=2)
    except Stopped as e:
        finished = True
        print(f"skrl-marl {args.command}: {e}", file=sys.stderr)
        return e.status
    except RanksDisagree as e:
        finished = True
        return _fail(args, e, status=1)
    except KeyboardInterrupt as e:
        return _fail(args, e, status=130, message="interrupted (Ctrl-C)")
    except Exception as e:
        return _fail(args, e, status=1, message=_one_line(e))
    finally:
        torch.set_num_threads(threads)  # main() may run inside another program (the tests)
        if created:  # a rank that failed leaves at once: waiting for the others could hang
            distributed.shutdown_torchrun_group(wait=finished)
    return 0


def _fail(args, error: BaseException, *, status: int, message: str | None = None) -> int:
    """Print ``skrl-marl <command>: error: <message>`` (and the traceback under ``--debug``); return ``status``."""
    if getattr(args, "debug", False):
        traceback.print_exception(error)
    print(f"skrl-marl {args.command}: error: {message or error}", file=sys.stderr)
    return status


def _one_line(error: BaseException) -> str:
    """An unexpected error as one line: its type and its message's lines joined (``--debug`` shows where)."""
    text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    name = type(error).__name__
    hint = "" if isinstance(error, OSError) else " (run with --debug for the traceback)"
    return f"{text}{hint}" if isinstance(error, (OSError, ValueError)) and text else f"{name}: {text}{hint}"
