"""Sphinx directives that generate the docs' reference tables from the code, so they cannot drift from it.

``.. config-table:: skrl_marl_ext.MAPPO_CFG``: every field of a config dataclass (inherited ones included) with its
default and its attribute docstring; a field whose default is a dataclass (``experiment``) gets a table of its own
fields below. ``.. cli-options:: train``: every argument of a ``skrl-marl`` sub-command with its help.
Use them inside ``{eval-rst}`` blocks of the MyST pages: the docstrings are reST.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect

from docutils import nodes
from docutils.statemachine import StringList
from marl_tables import config_rows, option_rows, subcommands
from sphinx.util.docutils import SphinxDirective


def _import(path: str):
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _table(directive: SphinxDirective, header: list[str], rows: list[list[nodes.Node]], widths: list[int]):
    table = nodes.table(classes=["longtable"])
    group = nodes.tgroup(cols=len(header))
    table += group
    group.extend(nodes.colspec(colwidth=width) for width in widths)
    head, body = nodes.thead(), nodes.tbody()
    group += head
    group += body
    head += nodes.row("", *(nodes.entry("", nodes.paragraph(text=text)) for text in header))
    for cells in rows:
        body += nodes.row("", *(nodes.entry("", *cell) for cell in cells))
    return table


class ConfigTable(SphinxDirective):
    """Table of a config dataclass's fields: name, default, docstring (parsed as reST)."""

    required_arguments = 1

    def _parse(self, text: str) -> list[nodes.Node]:
        container = nodes.container()
        self.state.nested_parse(StringList(text.splitlines(), source=self.arguments[0]), self.content_offset, container)
        return list(container.children)

    def _rows(self, cls: type) -> list[list[nodes.Node]]:
        rows = []
        for row in config_rows(cls):
            rows.append(
                [
                    [nodes.paragraph("", "", nodes.literal(text=row.name))],
                    [nodes.paragraph("", "", nodes.literal(text=row.default))],
                    self._parse(row.doc) if row.doc else [nodes.paragraph(text="")],
                ]
            )
        return rows

    def run(self) -> list[nodes.Node]:
        cls = _import(self.arguments[0])
        for klass in cls.__mro__:  # an edited field docstring rebuilds the page
            source = inspect.getsourcefile(klass) if klass.__module__ != "builtins" else None
            if source:
                self.env.note_dependency(source)
        result = [_table(self, ["field", "default", "meaning"], self._rows(cls), [22, 14, 64])]
        for field in dataclasses.fields(cls):
            if field.default_factory is not dataclasses.MISSING and dataclasses.is_dataclass(field.default_factory):
                nested = field.default_factory
                result.append(nodes.paragraph("", "", nodes.literal(text=field.name), nodes.Text(" fields:")))
                result.append(_table(self, ["field", "default", "meaning"], self._rows(nested), [22, 14, 64]))
        return result


class CliOptions(SphinxDirective):
    """Table of one ``skrl-marl`` sub-command's arguments, from ``skrl_marl_ext.cli.make_parser()``."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        from skrl_marl_ext.cli import parser as parser_module
        from skrl_marl_ext.cli.parser import make_parser

        self.env.note_dependency(parser_module.__file__)
        parser = subcommands(make_parser())[self.arguments[0]]
        usage = " ".join(parser.format_usage().split()).removeprefix("usage: ")
        rows = [
            [[nodes.paragraph("", "", nodes.literal(text=row.option))], [nodes.paragraph(text=row.help)]]
            for row in option_rows(parser)
        ]
        return [
            nodes.literal_block(text=usage, language="text"),
            _table(self, ["argument", "meaning (default)"], rows, [30, 70]),
        ]


def setup(app):
    app.add_directive("config-table", ConfigTable)
    app.add_directive("cli-options", CliOptions)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
