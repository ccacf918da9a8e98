"""The package stays readable: tests reach the agents through their public behaviour, and the measure of one step
runs."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_tests_call_no_private_method():
    """``x._method(...)`` in a test is a test of the implementation, not of behaviour (``self``/``cls`` of a test's own
    helper classes excepted)."""
    calls = [
        f"{path.name}:{node.lineno} {ast.unparse(node.func)}"
        for path in sorted((REPO / "tests").glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr.startswith("_")
        and not node.func.attr.startswith("__")
        and not (isinstance(node.func.value, ast.Name) and node.func.value.id in ("self", "cls", "torch"))
    ]
    assert not calls, f"tests calling private methods: {calls}"


def test_tests_patch_no_name_of_the_package():
    """``monkeypatch.setattr(<a module of the package>, ...)`` ties a test to where a module imports a name; tests
    observe or replace the update's math through the agent (``OnPolicyAgent.ppo_loss``, ...) instead."""
    import importlib.util

    found = []
    for path in sorted((REPO / "tests").glob("*.py")):
        tree = ast.parse(path.read_text())
        modules = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.startswith("skrl_marl_ext")}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("skrl_marl_ext"):
                for alias in node.names:
                    try:  # a module, not a name of one
                        is_module = importlib.util.find_spec(f"{node.module}.{alias.name}") is not None
                    except ModuleNotFoundError:  # the parent is a module's name, e.g. a class
                        is_module = False
                    if is_module:
                        modules.add(alias.asname or alias.name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("monkeypatch.setattr") and node.args:
                root = node.args[0]
                while isinstance(root, ast.Attribute):
                    root = root.value
                named = isinstance(root, ast.Constant) and str(root.value).startswith("skrl_marl_ext")
                if named or (isinstance(root, ast.Name) and root.id in modules):
                    found.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
    assert not found, f"tests patching the package's modules: {found}"


def test_call_count_profiles_the_agents_calls_only():
    """``benchmarks/call_count.py`` (the layout's measure) reaches both updates and counts nothing the env's step
    enters: skrl's space helpers, called by the env, are left out."""
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import call_count
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    skrl, ours = call_count.count("skrl"), call_count.count("ours")
    names = {
        which: {n.split(":")[0] for names in seen.values() for n in names}
        for which, seen in (("skrl", skrl), ("ours", ours))
    }
    assert {"update", "compute_gae"} <= names["skrl"]
    assert {"ppo_loss", "compute_gae", "_update_group"} <= names["ours"]
    for seen in (skrl, ours):
        assert not [path for path in seen if "spaces" in path or "/envs/" in path]


def test_one_mappo_step_stays_shallow():
    """One MAPPO step and update at the defaults (``benchmarks/call_count.py``): no deeper stack of named skrl/package
    frames than 6, and no more distinct lines than today (544: 490 before the update became one sequence, 537 with the
    per-agent Adam and the update's passes, then the update split into its packing, its mini-batch loss and the
    optimiser's per-agent bookkeeping, each a step of its own, and the tracked values' bound, three lines)."""
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import call_count
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    counts = call_count.by_part("ours", call_count.trace("ours"))
    assert counts["depth"] <= 6, counts
    assert counts["all"] <= 544, counts


def test_the_design_map_names_every_module():
    """docs/design.md's map of the package lists every module of it, each under its folder (a new module goes on the
    map, a moved one moves on it); a package's ``__init__.py`` where it defines something of its own."""
    import re

    text = (REPO / "docs" / "design.md").read_text()
    block = text.split("```", 2)[1]
    listed, folder = set(), ""
    for line in block.splitlines():
        top = re.match(r"^  (\w+)(/|\.py)", line)
        if top:
            folder = top.group(1) if top.group(2) == "/" else ""
        listed |= {(folder, name) for name in re.findall(r"\b(\w+\.py)\b", line)}
        if top and top.group(2) == ".py":  # the top-level files named on one line stay top-level
            folder = ""
    package = REPO / "skrl_marl_ext"
    modules = {
        (path.parent.name if path.parent != package else "", path.name)
        for path in package.rglob("*.py")
        if path.name != "__init__.py"
        or any(isinstance(node, (ast.FunctionDef, ast.ClassDef)) for node in ast.parse(path.read_text()).body)
    }
    missing = sorted(f"{folder}/{name}".lstrip("/") for folder, name in modules - listed)
    assert not missing, f"modules missing from docs/design.md's map: {missing}"
