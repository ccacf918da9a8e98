"""Rows of the docs' generated tables: config dataclass fields and ``skrl-marl`` options, read from the code.

No Sphinx here (``marl_directives`` renders the rows), so the tests can check the rows without building the docs.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import textwrap


@dataclasses.dataclass(frozen=True)
class ConfigRow:
    """One field of a config dataclass: its name, its default (as Python source) and its docstring (reST)."""

    name: str
    default: str
    doc: str


@functools.cache
def _attribute_docs(cls: type) -> dict[str, str]:
    """The attribute docstrings of ``cls``'s own body: the string literal right below each annotated field."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):
        return {}
    body = ast.parse(source).body[0].body
    docs = {}
    for field, after in zip(body, body[1:], strict=False):
        if (
            isinstance(field, ast.AnnAssign)
            and isinstance(field.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[field.target.id] = inspect.cleandoc(after.value.value)
    return docs


def field_doc(cls: type, name: str) -> str:
    """The docstring of field ``name`` from the nearest class of ``cls``'s MRO that documents it ("" if none)."""
    for klass in cls.__mro__:
        doc = _attribute_docs(klass).get(name)
        if doc:
            return doc
    return ""


def _default(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        return repr(field.default)
    if field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
        return f"{type(value).__name__}()" if dataclasses.is_dataclass(value) else repr(value)
    return "(required)"


def config_rows(cls: type) -> list[ConfigRow]:
    """One row per field of the config dataclass ``cls`` (inherited fields included), in declaration order.

    :param cls: A config dataclass, e.g. :class:`skrl_marl_ext.MAPPO_CFG`.
    :raises TypeError: When ``cls`` is not a dataclass.
    """
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"config_rows needs a dataclass, got {cls!r}")
    return [ConfigRow(f.name, _default(f), field_doc(cls, f.name)) for f in dataclasses.fields(cls)]


@dataclasses.dataclass(frozen=True)
class OptionRow:
    """One argument of a ``skrl-marl`` sub-command: how it is written and its help (defaults expanded)."""

    option: str
    help: str


def _written(action: argparse.Action) -> str:
    if not action.option_strings:
        return (
            f"{action.metavar or action.dest} ..." if action.nargs in ("*", "+") else str(action.metavar or action.dest)
        )
    if action.nargs == 0:
        return ", ".join(action.option_strings)
    metavar = action.metavar or (
        "{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest.upper()
    )
    return ", ".join(f"{option} {metavar}" for option in action.option_strings)


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The sub-command parsers of ``parser`` by name (``train``, ``eval``, ``export`` for ``skrl-marl``)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def option_rows(parser: argparse.ArgumentParser) -> list[OptionRow]:
    """One row per argument of ``parser`` (``--help`` left out), its help as ``--help`` prints it."""
    formatter = parser._get_formatter()
    return [
        OptionRow(_written(action), " ".join(formatter._expand_help(action).split()) if action.help else "")
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction) and action.help != argparse.SUPPRESS
    ]
