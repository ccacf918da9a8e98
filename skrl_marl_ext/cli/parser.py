"""The ``skrl-marl`` argument parser: the ``train``, ``eval`` and ``export`` sub-commands and their options."""

from __future__ import annotations

import argparse
import re
import sys

from skrl_marl_ext.checks.configs import did_you_mean

DEFAULT_ENV = "vmas:balance"
DEFAULT_NUM_ENVS = 128
DEFAULT_TIMESTEPS = 4000  # env steps of every env
THREADS_HELP = (
    "CPU threads of torch; 0 keeps torch's own default (default: %(default)s, as batched envs and small MLPs gain "
    "little from more, and on a busy machine extra threads spin-wait on each other)"
)
OVERRIDES_HELP = (
    "config overrides after the options, applied on top of the default or --config YAML: a dotted key inside one of "
    "the sections agent, models, memory, trainer, and a value read as YAML, e.g. agent.learning_rate=1e-3 "
    "agent.mixed_precision=true models.policy.hidden_sizes=[256,256] (quote it for your shell) "
    "agent.experiment.write_interval=50; recorded in run.json (default: none, the config as it is)"
)


class Parser(argparse.ArgumentParser):
    """argparse's parser taking whole option names only (``--num-env`` is not taken for ``--num-envs``), and naming
    the closest option, command or choice to one it does not know, with the usage of the command it was typed to
    (exit status 2). Its sub-command parsers are of this class too."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.commands: argparse._SubParsersAction | None = None
        self.typed: list[str] = []

    def add_subparsers(self, **kwargs):
        self.commands = super().add_subparsers(**kwargs)
        return self.commands

    def parse_known_args(self, args=None, namespace=None):
        self.typed = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(self.typed, namespace)

    def parse_args(self, args=None, namespace=None):
        """As argparse's, but an argument no option takes is reported by the command it was typed to."""
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            command = getattr(namespace, "command", None) if self.commands is not None else None
            parser = self.commands.choices.get(command, self) if command else self
            parser.error(parser.unrecognized(extras))
        return namespace

    def error(self, message: str):
        # a missing required option (eval --checkpoint) after a misspelt one: the misspelling is the news
        unknown = self.unknown_options(self.typed)
        if unknown and self.commands is None and message.startswith("the following arguments are required"):
            message = self.unrecognized(unknown)
        super().error(message)

    def _check_value(self, action, value):
        if action.choices is not None and value not in action.choices:
            choices = [str(choice) for choice in action.choices]
            raise argparse.ArgumentError(
                action, f"invalid choice '{value}'.{did_you_mean(value, choices)} Choose from {', '.join(choices)}"
            )

    def unknown_options(self, args: list[str]) -> list[str]:
        """The arguments of ``args`` that look like options this parser does not have."""
        unknown = []
        for arg in args:
            if arg == "--":
                break
            name = arg.partition("=")[0]
            if arg.startswith("-") and not re.fullmatch(r"-[\d.]+", arg) and name not in self._option_string_actions:
                unknown.append(arg)
        return unknown

    def unrecognized(self, extras: list[str]) -> str:
        """Why ``extras`` were not taken: the first unknown option and the closest this parser has."""
        unknown = self.unknown_options(extras)
        if not unknown:
            return f"unrecognized arguments: {' '.join(extras)}"
        name = unknown[0].partition("=")[0]
        options = [option for option in self._option_string_actions if option.startswith("--")]
        return f"unrecognized option '{name}'.{did_you_mean(name, options)} All options: {self.prog} --help"


def make_parser() -> argparse.ArgumentParser:
    """The ``skrl-marl`` parser; every option's help states its default."""
    parser = Parser(
        prog="skrl-marl",
        description="Train and evaluate skrl_marl_ext's agents.",
        # its arguments are Isaac Lab's, so skrl_marl_ext.cli.main hands them on before this parser sees them
        epilog="skrl-marl isaaclab {train,play} [isaaclab's options]: Isaac Lab 3.0's own skrl train and play with "
        "these agents (skrl-marl isaaclab --help)",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _add_train_parser(commands)
    _add_eval_parser(commands)
    _add_export_parser(commands)
    for command in commands.choices.values():
        command.add_argument(
            "--debug",
            action="store_true",
            help="on an error, print the traceback too (default: off, the error in one line)",
        )
    return parser


def _add_train_parser(commands) -> None:
    t = commands.add_parser(
        "train",
        help="train an agent (defaults: MAPPO on VMAS balance)",
        usage="skrl-marl train [options] [SECTION.KEY=VALUE ...]",
        epilog="example: skrl-marl train --env builtin:spread agent.learning_rate=1e-3 "
        "'models.policy.hidden_sizes=[256,256]'; under torchrun: torchrun --nproc_per_node=2 -m skrl_marl_ext train",
    )
    _add_task_options(t)
    _add_process_options(t)
    _add_model_options(t)
    _add_output_options(t)
    t.add_argument("overrides", nargs="*", metavar="SECTION.KEY=VALUE", help=OVERRIDES_HELP)


def _add_task_options(t: argparse.ArgumentParser) -> None:
    """What ``train`` trains on: algorithm, env and its arguments, envs per batch, steps."""
    t.add_argument(
        "--algo",
        default=None,
        help="mappo, ippo, happo, maddpg, masac or hasac (default: the --config's agent.class, else mappo)",
    )
    t.add_argument(
        "--env",
        default=DEFAULT_ENV,
        help="vmas:<scenario> | pettingzoo:<module> | mamujoco:<scenario>-<agent_conf> | builtin:spread | "
        "builtin:memory (default: %(default)s)",
    )
    t.add_argument(
        "--env-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="env argument, repeatable (default: none, the env's own defaults)",
    )
    t.add_argument(
        "--num-envs", type=int, default=DEFAULT_NUM_ENVS, help="envs stepped as one batch (default: %(default)s)"
    )
    t.add_argument(
        "--timesteps",
        type=int,
        default=None,
        help="env steps, each stepping every env; with --resume the run's new length (to train a finished run "
        f"further; else its own) (default: the config's trainer.timesteps, else {DEFAULT_TIMESTEPS})",
    )


def _add_process_options(t: argparse.ArgumentParser) -> None:
    """Where and how ``train`` runs: device, CPU threads, seed."""
    t.add_argument(
        "--device",
        default="cpu",
        help="device of env and agent: cpu, cuda, cuda:1, ...; under torchrun cuda means cuda:LOCAL_RANK "
        "(default: %(default)s)",
    )
    t.add_argument("--threads", type=int, default=1, help=THREADS_HELP)
    t.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of torch, numpy and the env; rank r takes seed + r (default: %(default)s)",
    )


def _add_model_options(t: argparse.ArgumentParser) -> None:
    """The agent ``train`` builds: its config file, shared models, recurrent models."""
    t.add_argument(
        "--config",
        default=None,
        help="skrl Runner YAML with models, memory, agent and trainer sections, or the name of one the package ships "
        "in skrl_marl_ext/configs, e.g. happo_mamujoco (HARL's tuned MaMuJoCo values) (default: the package's "
        "<algo>.yaml)",
    )
    t.add_argument(
        "--shared-policy",
        action="store_true",
        help="agents with equal spaces share their models (default: off, one model per agent)",
    )
    t.add_argument(
        "--rnn",
        choices=("gru", "lstm"),
        default=None,
        help="recurrent policy and value models (MAPPO/IPPO/HAPPO): a GRU or LSTM then one head layer; the run's sequences "
        "are --sequence-length steps (default: off, MLP models)",
    )
    t.add_argument(
        "--sequence-length",
        type=int,
        default=10,
        help="steps per training sequence of --rnn models; must divide agent.rollouts (default: %(default)s)",
    )


def _add_output_options(t: argparse.ArgumentParser) -> None:
    """Where ``train`` writes, and ``--resume`` of a run it wrote."""
    t.add_argument(
        "--out", default="runs", help="directory of the runs (default: %(default)s, in the working directory)"
    )
    t.add_argument("--no-progress", action="store_true", help="hide the progress bar (default: off, the bar is shown)")
    t.add_argument(
        "--resume",
        default=None,
        metavar="RUN_DIR",
        help="continue the run in RUN_DIR (a run directory of train, or a checkpoint in its checkpoints/) from its "
        "newest intact checkpoint (a damaged one is skipped with a warning), with the run's own config from its "
        "run.json, to its last step or to --timesteps, writing into RUN_DIR; the envs start new episodes "
        "(default: none, a new run)",
    )
    t.add_argument(
        "--from",
        dest="start_from",
        default=None,
        metavar="CHECKPOINT",
        help="with --resume: the checkpoint to go on from, a file or a step number (checkpoints/agent_<step>.pt) "
        "(default: the newest intact one)",
    )


def _add_eval_parser(commands) -> None:
    e = commands.add_parser("eval", help="run deterministic episodes of a trained agent")
    e.add_argument(
        "--checkpoint",
        required=True,
        help="run directory of 'skrl-marl train' (its final.pt, else its newest intact checkpoint), or a .pt file in "
        "its checkpoints/ (required, no default)",
    )
    e.add_argument(
        "--episodes", type=int, default=10, help="deterministic episodes to run and report (default: %(default)s)"
    )
    e.add_argument(
        "--num-envs", type=int, default=None, help="envs stepped as one batch (default: min(training envs, --episodes))"
    )
    e.add_argument("--device", default=None, help="device of env and agent (default: the training device)")
    e.add_argument("--threads", type=int, default=1, help=THREADS_HELP)
    e.add_argument(
        "--seed", type=int, default=12345, help="seed of torch, numpy and the env's episodes (default: %(default)s)"
    )


def _add_export_parser(commands) -> None:
    x = commands.add_parser(
        "export", help="write a checkpoint's models and preprocessors as a file skrl's MAPPO/IPPO load() reads"
    )
    x.add_argument(
        "checkpoint",
        help="checkpoint written by MAPPO, IPPO, HAPPO, MADDPG, MASAC or HASAC (a .pt file), or a run directory of train (its final.pt, "
        "else its newest intact checkpoint) (required)",
    )
    x.add_argument("--out", required=True, help="the file to write (required, no default)")
    x.set_defaults(threads=0)


def typed_options(argv: list[str]) -> set[str]:
    """The ``train`` options present in ``argv`` (argparse names; ``overrides`` when any was given): ``argv`` parsed
    again with every default suppressed (an option typed with its default value is still one the user chose)."""
    parser = make_parser()
    for action in parser._subparsers._group_actions[0].choices["train"]._actions:
        action.default = argparse.SUPPRESS
    return set(vars(parser.parse_args(argv))) - {"command"}


def given(args: argparse.Namespace) -> set[str]:
    """The ``train`` options typed on the command line (argparse names), as :func:`typed_options` found them."""
    return set(getattr(args, "given", ()))
