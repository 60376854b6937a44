"""The layering rules of docs/architecture.md, checked on the source: which package may import which, the one
pyroute2 importer, module size. Imports inside functions count as much as those at the top."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 500

#: packages that may not import genie.engine (the engine sits above them: types they share live in genie.core)
BELOW_ENGINE = ("core", "topology", "collectives", "workloads", "measure", "report", "faults", "lab", "inventory",
                "testbed", "linkemu")
#: what astra_adapter may never import (it must run without a live testbed)
NOT_IN_ADAPTER = ("genie.testbed", "genie.engine", "genie.services", "genie.report", "genie.cli", "genie.runs",
                  "genie.faults", "genie.lab")


def _modules() -> list[Path]:
    return sorted(p for top in ("genie", "astra_adapter") for p in (ROOT / top).rglob("*.py"))


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the module's package
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                names.append(".".join(base + ([node.module] if node.module else [])))
            else:
                names.append(node.module or "")
    return names


def _owner(path: Path) -> str:
    """`genie.<package>` (or `astra_adapter`) of a module."""
    parts = path.relative_to(ROOT).parts
    return "astra_adapter" if parts[0] == "astra_adapter" else ".".join(parts[:2]).removesuffix(".py")


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


IMPORTS = {path: _imports(path) for path in _modules()}


def _violations(rule) -> list[str]:
    return [f"{path.relative_to(ROOT)} imports {name}" for path, names in IMPORTS.items() for name in names
            if rule(path, _owner(path), name)]


def test_the_rules_see_the_code() -> None:
    """The checks below look at real imports (a scan that found nothing would pass every rule)."""
    assert len(IMPORTS) > 150
    assert any(_within(n, "genie.engine") for n in IMPORTS[ROOT / "genie" / "services" / "cases.py"])
    assert "pyroute2" in IMPORTS[ROOT / "genie" / "testbed" / "netlink" / "backend.py"]


def test_core_imports_only_core() -> None:
    assert _violations(lambda _p, owner, name: owner == "genie.core" and _within(name, "genie")
                       and not _within(name, "genie.core")) == []


def test_nothing_below_the_engine_imports_it() -> None:
    below = {f"genie.{p}" for p in BELOW_ENGINE}
    assert _violations(lambda _p, owner, name: owner in below and _within(name, "genie.engine")) == []


def test_astra_adapter_needs_no_testbed() -> None:
    assert _violations(lambda _p, owner, name: owner == "astra_adapter"
                       and any(_within(name, n) for n in NOT_IN_ADAPTER)) == []


def test_only_services_and_cli_use_the_adapter() -> None:
    assert _violations(lambda _p, owner, name: owner.startswith("genie") and _within(name, "astra_adapter")
                       and owner not in ("genie.services", "genie.cli")) == []


def test_nothing_imports_the_cli() -> None:
    assert _violations(lambda _p, owner, name: owner != "genie.cli" and _within(name, "genie.cli")) == []


def test_services_are_the_only_users_of_services_besides_the_cli() -> None:
    assert _violations(lambda _p, owner, name: owner not in ("genie.services", "genie.cli")
                       and _within(name, "genie.services")) == []


def test_only_netlink_imports_pyroute2() -> None:
    netlink = ROOT / "genie" / "testbed" / "netlink"
    assert _violations(lambda path, _o, name: path.parent != netlink and _within(name, "pyroute2")) == []


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_stay_small(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines (split it by responsibility)"


def test_the_lab_renders_without_the_report_package() -> None:
    """genie.lab writes its files with genie.core.files (it once imported genie.report for that)."""
    assert _violations(lambda _p, owner, name: owner == "genie.lab" and _within(name, "genie.report")) == []


def test_a_probe_imports_only_what_it_uses() -> None:
    """`genie testbed verify` starts ~40 probe processes per check of a leaf-spine: `genie.testbed`'s public names
    are imported when first used, so a probe does not import the backend, the kernel model or the topology
    reader (0.27 s each time); the names still resolve."""
    import subprocess
    import sys

    code = ("import sys, genie.testbed.probe\n"
            "print(sorted(m for m in sys.modules if m.startswith('genie.') and m != 'genie.testbed.probe'))\n"
            "import genie.testbed as t\n"
            "print(t.up.__module__, t.FakeBackend.__module__, t.ShaperChoice.__module__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
                         timeout=60).stdout.splitlines()
    assert out == ["['genie.testbed']", "genie.testbed.service genie.testbed.backend genie.testbed.steps"]


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in _modules()}


def _module_of(name: str) -> str | None:
    """The genie/astra_adapter module an imported name lives in (`a.b.c` -> the longest existing prefix)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _import_graph() -> dict[str, set[str]]:
    """module -> the modules it imports (at the top or inside functions); `from pkg import mod` counts as an
    import of `pkg.mod`."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: list[str] = []
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                targets += [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                            for alias in node.names]
        graph[name] = {m for m in map(_module_of, targets) if m is not None and m != name}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            child = next(edges, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_the_circle_finder_finds_circles() -> None:
    """A circle through three modules is found (with its members), a one-way chain is not."""
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
    assert sorted(import_circles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c", "a"}})) == [["a", "b"], ["c", "d"]]


def test_the_import_graph_sees_lazy_and_module_imports() -> None:
    graph = _import_graph()
    assert "genie.services.cases" in graph["genie.services.host_probe"]  # imported inside a function
    assert "genie.services.cases" in graph["genie.services.bench"]


def test_no_import_circles() -> None:
    """Imports go one way: no module reaches itself through others (imports inside functions count: a lazy
    import saves start-up time, not a layering). Break a circle by moving the shared type or rule down, or by
    passing the result in."""
    graph = _import_graph()
    circles = import_circles(graph)
    assert circles == [], "import circles: " + "; ".join(
        " <-> ".join(c) + " (" + ", ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) + ")" for c in circles)
