"""Sphinx configuration of the skrl-marl-ext docs: MyST Markdown pages (their reference tables are written into them by
make_docs_tables.py), autodoc API."""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the package, when it is not installed

import skrl_marl_ext  # noqa: E402

project = "skrl-marl-ext"
author = "skrl-marl-ext contributors"
release = skrl_marl_ext.__version__
version = release

extensions = ["myst_parser", "sphinx.ext.autodoc"]

source_suffix = {".md": "markdown"}
smartquotes = False  # "--config" must stay two hyphens in the generated CLI tables
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence", "dollarmath"]
myst_heading_anchors = 3  # [text](page.md#a-heading) links resolve

autodoc_member_order = "bysource"
autoclass_content = "both"  # skrl's style: many classes are described in their __init__ docstring
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}

html_theme = "alabaster"
html_title = f"skrl-marl-ext {release}"
html_static_path = ["_static"]
html_css_files = ["custom.css"]  # code blocks and tables scroll rather than being cut
