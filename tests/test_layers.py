"""The package's import graph against the planned layers (issue #21): every import a module makes,
at module level or inside a function, points to its own layer or one below, and no modules import each
other round in a circle. The layers and the few known exceptions are defined here, once."""

from __future__ import annotations

import ast
from pathlib import Path

import autotune

PACKAGE = Path(autotune.__file__).parent

# Top to bottom: a module may import its own layer and any layer below it, never one above. Folders
# separated by a comma in the plan (reasoner/ and output/, kb/ and executors/, engine/, probes/ and
# config/) share a layer. Each entry names a module or a subpackage (all its modules). A module named in
# no layer fails the test.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # the argument grammar's entry and the kb commands
    ("cli", ("cli",)),
    # the library API the CLI is a client of: autotune/__init__.py and what it exposes
    ("api", ("autotune", "api")),
    # the ask/tell loop, its drivers, the pure decisions, the run state; advice (`autotune suggest`) is the
    # loop's ask without a device
    ("loop", ("loop",)),
    # the reasoner; the run folder, report, results, plots, display, tracking, the hand-over
    ("reasoner, output", ("reasoner", "output")),
    # one folder per kind of job, with its runner, its exporter and its job builder
    ("workloads", ("workloads",)),
    ("kb, executors", ("kb", "executors")),
    # what runners share; the probes; the Job, its keys and values, the knob table, presets, the messages
    ("engine, probes, config", ("engine", "probes", "config")),
    ("util", ("util", "schemas")),
)

# Imports that still point upward, each with why it is there. The test fails on any violation not listed
# here and on a listed one that is gone (so the list only shrinks). (importer, imported), names relative
# to the package.
KNOWN_UPWARD: dict[tuple[str, str], str] = {}


def module_files() -> dict[str, tuple[Path, bool]]:
    """Every module of the package by dotted name relative to it ('autotune' for the package itself),
    with its file and whether it is a package's __init__."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        package = parts[-1] == "__init__"
        if package:
            parts = parts[:-1]
        found[".".join(parts) or "autotune"] = (path, package)
    return found


def _known(name: str, modules: dict[str, tuple[Path, bool]]) -> str | None:
    """The module an absolute dotted name (without 'autotune.') lands in: itself, else its nearest parent."""
    while name not in modules and "." in name:
        name = name.rsplit(".", 1)[0]
    return name if name in modules else None


def _targets(node: ast.Import | ast.ImportFrom, name: str, package: bool, modules: dict[str, tuple[Path, bool]]) -> list[str]:
    """The package's modules one import statement of module `name` reaches."""
    if isinstance(node, ast.Import):
        dotted = [a.name for a in node.names if a.name == "autotune" or a.name.startswith("autotune.")]
    else:
        if node.level:
            here = ["autotune", *name.split(".")] if name != "autotune" else ["autotune"]
            base = here if package else here[:-1]
            base = base[: len(base) - (node.level - 1)]
            stem = ".".join(base + ([node.module] if node.module else []))
        else:
            stem = node.module or ""
            if stem != "autotune" and not stem.startswith("autotune."):
                return []
        # `from . import x` imports the module x when there is one, else a name of the package.
        dotted = [f"{stem}.{a.name}" if _known_exact(f"{stem}.{a.name}", modules) else stem for a in node.names]
    out = []
    for full in dotted:
        relative = full[len("autotune."):] if full.startswith("autotune.") else "autotune"
        target = _known(relative, modules)
        if target is not None and target != name:
            out.append(target)
    return out


def _known_exact(full: str, modules: dict[str, tuple[Path, bool]]) -> bool:
    return full[len("autotune."):] in modules


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, package) in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[name].update(_targets(node, name, package, modules))
    return graph


def layer_of(name: str) -> int | None:
    """The index of the layer whose most specific entry covers `name` (a module or its subpackage)."""
    best, best_length = None, -1
    for index, (_, entries) in enumerate(LAYERS):
        for entry in entries:
            if (name == entry or name.startswith(entry + ".")) and len(entry) > best_length:
                best, best_length = index, len(entry)
    return best


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each as one cycle through it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(_one_cycle(sorted(component), graph))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def _one_cycle(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """A path from the component's first module back to it, inside the component (breadth first)."""
    members, start = set(component), component[0]
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for successor in sorted(graph[node] & members):
            if successor == start:
                return paths[node] + [start]
            if successor not in paths:
                paths[successor] = paths[node] + [successor]
                queue.append(successor)
    return component


def upward(graph: dict[str, set[str]]) -> dict[tuple[str, str], str]:
    found = {}
    for importer, imported in sorted((a, b) for a, bs in graph.items() for b in bs):
        above, below = layer_of(importer), layer_of(imported)
        if above is not None and below is not None and below < above:
            found[(importer, imported)] = f"{LAYERS[above][0]} imports {LAYERS[below][0]}"
    return found


def test_every_module_has_a_layer():
    unplaced = sorted(name for name in module_files() if layer_of(name) is None)
    assert not unplaced, f"modules in no layer of tests/test_layers.py LAYERS: {unplaced}"


def test_no_module_imports_itself_round_a_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" -> ".join(cycle) for cycle in found)


def test_no_import_points_to_a_higher_layer():
    found = upward(import_graph())
    new = {pair: why for pair, why in found.items() if pair not in KNOWN_UPWARD}
    assert not new, "upward imports: " + "; ".join(f"{a} -> {b} ({why})" for (a, b), why in new.items())


def test_every_known_exception_is_still_there():
    gone = sorted(set(KNOWN_UPWARD) - set(upward(import_graph())))
    assert not gone, f"fixed, so delete from KNOWN_UPWARD in tests/test_layers.py: {gone}"


def test_the_walk_sees_function_level_and_relative_imports():
    """The graph holds what the walk is for: a function-level relative import (cli's lazy ones), a
    `from . import x` resolved to the module x, and a module-level one."""
    graph = import_graph()
    assert "api" in graph["cli.main"]  # `from ..api import tune as tune_job` inside a function
    assert "cli.kb_commands" in graph["cli.main"]  # `from . import kb_commands` inside _parser
    assert "loop.tuner" in graph["api"]  # `from .loop.tuner import Tuner` inside a function
    assert "config.messages" in graph["executors.local"]  # `from ..config.messages import ...` at module level
