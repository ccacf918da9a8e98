"""Write the docs' reference tables into their Markdown pages, from the code: config fields and ``skrl-marl`` options.

A page under ``docs/`` holds each generated block between two markers::

    <!-- generated: config-table skrl_marl_ext.MAPPO_CFG -->
    ... (rewritten by this script)
    <!-- end generated -->

``config-table CLASS``: every field of a config dataclass (inherited ones included) with its default and its
attribute docstring (reST turned into Markdown), and below it a table of the fields of a field whose default is a
dataclass (``experiment``). ``cli-options COMMAND``: the usage line and every argument of a ``skrl-marl``
sub-command with its help, as ``--help`` prints them. The pages stay plain Markdown, so GitHub shows the tables as
Sphinx does.

Usage: ``python docs/make_docs_tables.py`` rewrites every page in place; ``--check`` writes nothing and exits 1 when
a page differs from what the code gives. ``--root DIR`` works on another copy of the folder.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import importlib
import inspect
import re
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the package, when it is not installed
BLOCK = re.compile(r"<!-- generated: (?P<spec>[^>]*?) -->\n.*?<!-- end generated -->", re.DOTALL)

# ---------------------------------------------------------------------------------------------------- config fields


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


# ---------------------------------------------------------------------------------------------------- CLI options


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


# ---------------------------------------------------------------------------------------------------- Markdown

INLINE = re.compile(r"`(?P<text>[^`<]+?) <(?P<url>[^>]+)>`__?|``(?P<literal>.+?)``|`(?P<code>[^`]+)`", re.DOTALL)
ROLE = re.compile(r":[a-z]+:`(?P<tilde>~?)(?P<target>[^`]+)`")
BULLET = re.compile(r"\n\s*[-*] ")


def code(text: str) -> str:
    """``text`` as a Markdown code span fit for a table cell."""
    text = text.replace("|", "\\|")
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def plain(text: str, *, emphasis: bool = False) -> str:
    """Text escaped for a Markdown table cell: nothing in it reads as HTML, a cell border, math or code (nor as
    emphasis unless ``emphasis``: reST's ``*x*`` and ``**x**`` are Markdown's too)."""
    text = re.sub(r"([\\`<>|$])" if emphasis else r"([\\`*<>|$])", r"\\\1", text)
    return re.sub(r"(?<!\w)_|_(?!\w)", r"\\_", text)


def rest_to_markdown(doc: str) -> str:
    """A field docstring (reST) as one Markdown table cell: inline literals and roles as code spans (a role's ``~``
    keeps the last name), links as links, list items and paragraphs on lines of their own (``<br>``)."""

    def role(match: re.Match) -> str:
        target = match.group("target")
        label, inner, _ = target.partition(" <")
        if inner:
            return f"``{label}``"
        return f"``{target.rpartition('.')[2] if match.group('tilde') else target}``"

    def inline(text: str) -> str:
        pieces, at = [], 0
        for match in INLINE.finditer(text):
            pieces.append(plain(text[at : match.start()], emphasis=True))
            if match.group("url"):
                pieces.append(f"[{plain(match.group('text'))}]({match.group('url')})")
            else:
                pieces.append(code(match.group("literal") or match.group("code")))
            at = match.end()
        pieces.append(plain(text[at:], emphasis=True))
        return "".join(pieces)

    paragraphs = []
    for paragraph in re.split(r"\n\s*\n", ROLE.sub(role, doc).strip()):
        items = BULLET.split("\n" + paragraph)
        lines = [inline(" ".join(items[0].split()))] if items[0].strip() else []
        lines += ["- " + inline(" ".join(item.split())) for item in items[1:]]
        paragraphs.append("<br>".join(lines))
    return "<br><br>".join(p for p in paragraphs if p)


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def config_table(cls: type) -> str:
    """The Markdown of a ``config-table`` block: the fields' table, then one per dataclass-valued field."""

    def rows(klass: type) -> list[list[str]]:
        return [[code(r.name), code(r.default), rest_to_markdown(r.doc)] for r in config_rows(klass)]

    parts = [table(["field", "default", "meaning"], rows(cls))]
    for field in dataclasses.fields(cls):
        if field.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(field.default_factory):
            parts += [
                f"{code(field.name)} fields:",
                table(["field", "default", "meaning"], rows(field.default_factory)),
            ]
    return "\n\n".join(parts)


def cli_options(command: str) -> str:
    """The Markdown of a ``cli-options`` block: the sub-command's usage line, then its arguments' table."""
    from skrl_marl_ext.cli.parser import make_parser

    parsers = subcommands(make_parser())
    if command not in parsers:
        raise ValueError(f"cli-options {command!r}: no such skrl-marl command; use one of {', '.join(parsers)}")
    parser = parsers[command]
    usage = " ".join(parser.format_usage().split()).removeprefix("usage: ")
    rows = [[code(row.option), plain(row.help)] for row in option_rows(parser)]
    return f"```text\n{usage}\n```\n\n" + table(["argument", "meaning (default)"], rows)


def render(spec: str) -> str:
    """The Markdown a marker stands for.

    :param spec: the marker's text after ``generated:``, ``config-table <module>.<Class>`` or ``cli-options
        <command>``
    """
    kind, _, argument = spec.partition(" ")
    if kind == "config-table":
        module, _, name = argument.strip().rpartition(".")
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError, ValueError):
            raise ValueError(f"config-table {argument!r}: no such class; name it as module.Class") from None
        return config_table(cls)
    if kind == "cli-options":
        return cli_options(argument.strip())
    raise ValueError(f"generated block {spec!r}: unknown kind {kind!r}; use config-table or cli-options")


def regenerate(text: str) -> str:
    """A page's text with every generated block written anew from the code."""

    def block(match: re.Match) -> str:
        spec = match.group("spec")
        return f"<!-- generated: {spec} -->\n\n{render(spec)}\n\n<!-- end generated -->"

    return BLOCK.sub(block, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a page is stale")
    parser.add_argument("--root", type=Path, default=HERE, help="the docs folder (default: this script's)")
    args = parser.parse_args(argv)
    stale = []
    for page in sorted(args.root.glob("*.md")):
        text = page.read_text()
        try:
            new = regenerate(text)
        except ValueError as error:
            parser.exit(2, f"{page}: {error}\n")
        if new != text:
            stale.append(page)
            if not args.check:
                page.write_text(new)
    for page in stale:
        print(f"{'stale' if args.check else 'rewrote'}: {page}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
