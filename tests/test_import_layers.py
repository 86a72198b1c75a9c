"""Imports point down the layers README.md states, and no modules import each other in a cycle.

The package is read with ``ast``, not imported, so an import inside a function (a lazy import) counts like one
at the top of a module: hiding a cycle in a function body does not remove it. README's "Architecture" section
states the order in two lines, ``mwb: a → b → ...`` (the package's subpackages) and ``mwb/core: ...`` (core's
parts); ``{a, b}`` is one layer whose parts may import each other. Those lines are the only copy of the
order: this test parses them.
"""
from __future__ import annotations

import ast
import functools
import os
import re
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mwb"

# ------------------------------------------------------------------------------------------- the checker


def module_files(pkg_dir: Path) -> dict[str, Path]:
    """Dotted module name → file, for every ``.py`` under ``pkg_dir`` (a package is its ``__init__``)."""
    mods = {}
    for path in sorted(pkg_dir.rglob("*.py")):
        parts = list(path.relative_to(pkg_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        mods[".".join(parts)] = path
    return mods


def _resolve(name: str, mods: dict) -> str | None:
    """The module ``name`` refers to: itself, or the nearest enclosing module (``pkg.mod.attr`` → ``pkg.mod``)."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(pkg_dir: Path) -> tuple[dict[str, dict[str, int]], dict[str, Path]]:
    """({module: {imported module of the same package: line of the first such import}}, module files)."""
    mods = module_files(pkg_dir)
    pkg = pkg_dir.name
    graph: dict[str, dict[str, int]] = {m: {} for m in mods}
    for mod, path in mods.items():
        here = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                target = _resolve(name, mods) if name.split(".")[0] == pkg else None
                # importing a package you are inside of only runs code that is already running
                if target and target != mod and not mod.startswith(target + "."):
                    graph[mod].setdefault(target, node.lineno)
    return graph, mods


def cycles(graph: dict[str, dict[str, int]]) -> list[set[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(graph[w])))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(comp)
    return found


def describe_cycle(comp: set[str], graph, mods, base: Path) -> str:
    """The imports that close a cycle, as ``file:line imports module`` items."""
    edges = [f"{mods[a].relative_to(base)}:{line} imports {b}"
             for a in sorted(comp) for b, line in sorted(graph[a].items()) if b in comp]
    return "import cycle between " + ", ".join(sorted(comp)) + ": " + "; ".join(edges)


def render_order(layers: list[set[str]]) -> str:
    return " → ".join(next(iter(x)) if len(x) == 1 else "{" + ", ".join(sorted(x)) + "}" for x in layers)


def parse_order(line: str) -> list[set[str]]:
    """``a → {b, c} → d`` → ``[{a}, {b, c}, {d}]``."""
    layers = []
    for part in line.split("→"):
        part = part.strip()
        names = part[1:-1].split(",") if part.startswith("{") and part.endswith("}") else [part]
        layers.append({n.strip() for n in names if n.strip()})
    if not layers or any(not layer for layer in layers):
        raise ValueError(f"cannot read a layer order from {line!r}")
    return layers


def readme_orders(readme: str) -> dict[str, list[set[str]]]:
    """``{package path: layers}`` from the ``mwb: ...`` and ``mwb/core: ...`` lines of README's Architecture."""
    section = readme.split("## Architecture", 1)[1].split("\n## ", 1)[0]
    orders = {m.group(1): parse_order(m.group(2))
              for m in re.finditer(r"^\s*(mwb(?:/\w+)*):\s+(\S.*→.*)$", section, re.M)}
    if "mwb" not in orders or "mwb/core" not in orders:
        raise ValueError("README's Architecture section must state the layer order as lines "
                         "'mwb: a → b → ...' and 'mwb/core: a → ...'")
    return orders


def layer_problems(pkg_dir: Path, orders: dict[str, list[set[str]]]) -> list[str]:
    """Every import that points up an order (file:line, the import, the two layers), every module that sits
    in no layer, every layer name that names nothing, and every cycle. ``orders`` maps a package path
    (``"mwb"``, ``"mwb/core"``) to its layers, top first; the package itself and ``__main__`` are entry
    points above every layer."""
    graph, mods = import_graph(pkg_dir)
    problems = []

    def placed(mod: str, scope: str):
        """(layer index, part name) of ``mod`` in the order of ``scope``, None if outside that package."""
        prefix = scope.replace("/", ".")
        if not mod.startswith(prefix + "."):
            return None
        part = mod[len(prefix) + 1:].split(".")[0]
        for i, layer in enumerate(orders[scope]):
            if part in layer:
                return i, part
        return -1, part

    for scope, layers in orders.items():
        prefix = scope.replace("/", ".")
        parts = {m[len(prefix) + 1:].split(".")[0] for m in mods if m.startswith(prefix + ".")}
        for name in sorted(set().union(*layers) - parts):
            problems.append(f"README's {scope} order names '{name}', which is not in {scope}/")
        for name in sorted(parts - set().union(*layers) - {"__main__"}):
            problems.append(f"{scope}/{name} is in no layer: add it to README's '{scope}:' order")
    for mod, targets in sorted(graph.items()):
        for target, line in sorted(targets.items()):
            for scope in orders:
                a, b = placed(mod, scope), placed(target, scope)
                if a is None or b is None or a[0] < 0 or b[0] < 0 or a[1] == b[1]:
                    continue
                if b[0] < a[0]:
                    where = mods[mod].relative_to(pkg_dir.parent)
                    problems.append(f"{where}:{line} imports {target}: {scope} layer '{a[1]}' must not import "
                                    f"'{b[1]}', which is above it ({render_order(orders[scope])})")
    for comp in cycles(graph):
        problems.append(describe_cycle(comp, graph, mods, pkg_dir.parent))
    return problems


# ----------------------------------------------------------------------------------------------- tests


@functools.lru_cache(maxsize=1)
def _mwb_problems() -> tuple[str, ...]:
    return tuple(layer_problems(PACKAGE, readme_orders((ROOT / "README.md").read_text(encoding="utf-8"))))


def test_readme_states_both_layer_orders():
    orders = readme_orders((ROOT / "README.md").read_text(encoding="utf-8"))
    assert [sorted(x) for x in orders["mwb"]][:3] == [["cli"], ["repro"], ["tasks"]] and {"core"} in orders["mwb"]
    assert {"models"} in orders["mwb/core"] and {"parallel"} in orders["mwb/core"]
    core = orders["mwb/core"]
    assert core.index({"parallel"}) < core.index({"models"}), "models must sit below parallel"


def test_no_upward_import_and_no_cycle_in_mwb():
    problems = list(_mwb_problems())
    assert not problems, "\n".join(problems)


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


SYNTHETIC = {
    "pkg/__init__.py": "",
    "pkg/__main__.py": "from pkg.app import main\n",
    "pkg/app/__init__.py": "",
    "pkg/app/main.py": "from ..base import util\n",
    "pkg/base/__init__.py": "",
    "pkg/base/util.py": "import os\n",
    "pkg/base/core/__init__.py": "",
    "pkg/base/core/high.py": "from . import low\n",
    "pkg/base/core/low.py": "X = 1\n",
}
ORDERS = {"pkg": [{"app"}, {"base"}], "pkg/base": [{"core", "util"}]}


def test_checker_passes_a_clean_package(tmp_path):
    _write(tmp_path, SYNTHETIC)
    assert layer_problems(tmp_path / "pkg", ORDERS) == []


def test_checker_names_a_lazy_upward_import_and_a_cycle(tmp_path):
    _write(tmp_path, {**SYNTHETIC,
                      "pkg/base/util.py": """\
                          import os


                          def helper():
                              from pkg.app.main import run  # lazy, and upward: base is below app
                              return run
                          """,
                      "pkg/base/core/low.py": "from .high import Y\nX = 1\n",
                      "pkg/extra/__init__.py": ""})
    problems = layer_problems(tmp_path / "pkg", ORDERS)
    assert any(p.startswith(os.path.join("pkg", "base", "util.py") + ":5 imports pkg.app.main: pkg layer 'base'")
               for p in problems), problems
    assert any(p.startswith("import cycle between pkg.app.main, pkg.base.util:") for p in problems), problems
    assert any(p.startswith("import cycle between pkg.base.core.high, pkg.base.core.low:") and "low.py:1" in p
               for p in problems), problems
    assert "pkg/extra is in no layer: add it to README's 'pkg:' order" in problems
    upward_core = ORDERS | {"pkg/base/core": [{"low"}, {"high"}]}  # now high → low points up
    assert any("layer 'high' must not import 'low'" in p for p in layer_problems(tmp_path / "pkg", upward_core))


def test_readme_parser_reads_groups_and_rejects_a_missing_order():
    assert parse_order("a → {b, c} → d") == [{"a"}, {"b", "c"}, {"d"}]
    with pytest.raises(ValueError, match="layer order"):
        readme_orders("## Architecture\nmwb: a → b\n## Next\n")
