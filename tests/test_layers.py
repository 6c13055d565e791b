"""The package's import graph: no circle, and every layer imports only the layers below it."""

from __future__ import annotations

import ast
from pathlib import Path

import srl

ROOT = Path(srl.__file__).parent

#: What each layer may import from srl (besides itself), as the design says: api and data know
#: nothing of workers; workers know streams, not launchers; algorithms and envs know api and data.
ALLOWED = {
    "data": set(),
    "api": {"data"},
    # A policy may act by searching its own model (MuZero).
    "models": {"api", "data", "search"},
    # An algorithm names the graph it trains in: the builders (graphs) know only api.
    "algorithms": {"api", "data", "replay", "graphs"},
    "graphs": {"api"},
    # What a trainer does without the worker: the batcher, the learner, checkpoints.
    "learn": {"api", "data"},
    "envs": {"api", "data"},
    "streams": {"api", "data"},
    "replay": {"data"},
    # Tree search over a learned model (MuZero): pure NumPy, called by actors and reanalyse workers.
    "search": {"data"},
    # Self-play's pure parts (the pool store, opponent selection, ratings, games): below workers.
    "league": {"api", "data"},
    "workers": {"api", "data", "streams", "envs", "replay", "league", "learn"},
    # Run modes (launch.modes) add groups to the algorithms' graphs.
    "launch": {"api", "data", "streams", "workers", "graphs", "learn"},
    # The user's view of runs reads run directories: of launch, only the run directory's layout
    # (test_report_reads_only_the_run_directory_of_launch).
    "report": {"api", "data", "launch", "learn"},
}


def _modules() -> dict[str, Path]:
    modules = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """srl modules this one imports, at the top or inside functions alike."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            submodules = {f"{base}.{alias.name}" for alias in node.names} & modules.keys()
            found |= submodules
            if len(submodules) < len(node.names):  # names from the module itself
                found.add(base)
    return {m for m in found if m in modules and m != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of the graph, or None (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> list[str] | None:
        state[module] = 1
        for dep in sorted(graph[module]):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state and (found := visit(dep, [*path, dep])):
                return found
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module, [module])):
            return found
    return None


def test_the_package_has_no_import_circle():
    circle = _circle(_graph())
    assert circle is None, f"import circle: {' -> '.join(circle)}"


def test_layers_import_only_what_is_below_them():
    wrong = []
    for module, deps in _graph().items():
        layer = module.split(".")[1] if module.count(".") else None
        if layer not in ALLOWED:
            continue
        for dep in deps:
            other = dep.split(".")[1] if dep.count(".") else None
            if other is not None and other != layer and other not in ALLOWED[layer]:
                wrong.append(f"{module} imports {dep}")
    assert not wrong, "\n".join(sorted(wrong))


def test_report_reads_only_the_run_directory_of_launch():
    wrong = [f"{module} imports {dep}" for module, deps in _graph().items() if module.startswith("srl.report")
             for dep in deps if dep.startswith("srl.launch") and dep != "srl.launch.run_dir"]
    assert not wrong, "\n".join(sorted(wrong))


def test_the_checker_sees_a_circle(tmp_path, monkeypatch):
    """The circle test can fail: two modules that import each other are found."""
    (tmp_path / "a.py").write_text("from srl.b import x\n")
    (tmp_path / "b.py").write_text("import srl.a\n")
    modules = {"srl.a": tmp_path / "a.py", "srl.b": tmp_path / "b.py"}
    assert _imports("srl.a", modules["srl.a"], modules) == {"srl.b"}
    assert _imports("srl.b", modules["srl.b"], modules) == {"srl.a"}
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert _circle(graph) == ["srl.a", "srl.b", "srl.a"]
