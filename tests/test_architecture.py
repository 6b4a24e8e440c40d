"""The import structure DESIGN §2 sets: no module cycles, no reaching into another module's
private names, `core` a leaf, and imports flowing one way between packages.

Every import counts, those inside functions too (a deferred import is still a dependency).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "profiler", "engines", "recommender", "runners", "app")
# Which packages each may import (besides itself and core).
ALLOWED = {
    "core": set(),
    "profiler": set(),
    "engines": set(),
    "recommender": {"profiler", "engines"},
    "runners": {"profiler", "engines"},
    "app": {"profiler", "engines", "recommender", "runners"},
}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            parts = f.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = f
    return out


MODULES = _modules()


def _target(module: str, name: str) -> str:
    full = f"{module}.{name}"
    return full if full in MODULES else module


def _imports(name: str, path: Path) -> tuple[set[str], list[str]]:
    """(modules of ours that `name` imports, private names it takes from other modules)."""
    deps: set[str] = set()
    private: list[str] = []
    aliases: dict[str, str] = {}  # local name -> our module it is bound to
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] in PACKAGES:
            for alias in node.names:
                target = _target(node.module, alias.name)
                deps.add(target)
                if target in MODULES and target != node.module:
                    aliases[alias.asname or alias.name] = target
                elif alias.name.startswith("_") and node.module != name:
                    private.append(f"{name}: from {node.module} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES:
                    deps.add(alias.name)
                    if alias.asname:
                        aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in aliases and node.attr.startswith("_") \
                and not node.attr.startswith("__") and aliases[node.value.id] != name:
            private.append(f"{name}: {aliases[node.value.id]}.{node.attr}")
    return deps - {name}, private


@functools.cache
def _walk() -> tuple[dict[str, set[str]], list[str]]:
    """(our modules each module imports, private names taken from other modules), over every
    module; walked when a test first asks (not at collection, which every xdist worker does)."""
    graph: dict[str, set[str]] = {}
    private: list[str] = []
    for name, path in MODULES.items():
        deps, taken = _imports(name, path)
        graph[name] = {d for d in deps if d in MODULES}
        private += taken
    return graph, private


def _graph() -> dict[str, set[str]]:
    return _walk()[0]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_the_walk_sees_real_imports() -> None:
    # Guards the test itself: a walk that found nothing would pass everything below.
    assert "core.errors" in _graph()["profiler.workspace"]
    assert "engines.config" in _graph()["recommender.decision.recommendation"]
    assert len(MODULES) > 100


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def test_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_no_module_takes_another_modules_private_names() -> None:
    assert _walk()[1] == []


def test_packages_import_only_what_design_allows() -> None:
    wrong = sorted(
        f"{mod} -> {dep}" for mod, deps in _graph().items() for dep in deps
        if (a := mod.split(".")[0]) != (b := dep.split(".")[0])
        and b != "core" and b not in ALLOWED[a]
    )
    assert wrong == []


def test_core_is_a_leaf() -> None:
    assert all(d.startswith("core") for m, deps in _graph().items() if m.startswith("core")
               for d in deps)



def _pydantic_subclasses(source: str) -> list[str]:
    """Names of the classes in `source` that name pydantic's BaseModel as a base."""
    return [node.name for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.ClassDef)
            and any((b.id if isinstance(b, ast.Name) else getattr(b, "attr", None))
                    == "BaseModel" for b in node.bases)]


def test_every_record_derives_from_the_one_base_in_core() -> None:
    # One base (core.records.Record): unknown fields an error, frozen unless a record says
    # it is filled in place (MutableRecord), so no record quietly ignores a typo.
    direct = [f"{mod}.{name}" for mod, path in MODULES.items()
              for name in _pydantic_subclasses(path.read_text())]
    assert direct == ["core.records.Record"]


def test_the_base_finder_sees_direct_subclasses_however_imported() -> None:
    # Guards the test above: a finder that saw nothing would pass it.
    source = ("import pydantic\nfrom pydantic import BaseModel\n"
              "class A(pydantic.BaseModel):\n    x: int\n"
              "class B(BaseModel):\n    y: int\n"
              "class C(B):\n    z: int\n")
    assert _pydantic_subclasses(source) == ["A", "B"]


@functools.cache  # one parse per module: `_reexported` asks once per import of it
def _defined(source: str) -> frozenset[str]:
    """Names a module's top level binds itself (defs, classes, assignments), those inside a
    top-level `if` or `try` too; imported names are not among them."""
    names: set[str] = set()
    tree = ast.parse(source)
    nodes = [n for top in tree.body
             for n in ([top] if not isinstance(top, (ast.If, ast.Try)) else ast.walk(top))]
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return frozenset(names)


def _reexported(source: str, modules: dict[str, str]) -> list[str]:
    """`from M import N` in `source` where M (one of `modules`: name -> source) does not
    define N and N is no submodule of M: N reached by a second import path."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in modules:
            defined = _defined(modules[node.module])
            out += [f"from {node.module} import {a.name}" for a in node.names
                    if a.name not in defined and f"{node.module}.{a.name}" not in modules]
    return out


def _exported_not_defined(source: str) -> list[str]:
    """Names `__all__` lists that the module does not define (re-exports)."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            names = [e.value for e in ast.walk(node.value) if isinstance(e, ast.Constant)]
            return sorted(set(names) - _defined(source))
    return []


def test_every_name_has_one_import_path() -> None:
    # A name is imported from the module that defines it (DESIGN §2, issue 29): splits "for
    # size" that left re-exports gave names two paths, and a reader two places to look.
    sources = {name: path.read_text() for name, path in MODULES.items()}
    readers = [*MODULES.values(), *sorted(
        p for d in ("tests", "bench", "scripts") for p in (ROOT / d).rglob("*.py"))]
    found = [f"{p.relative_to(ROOT)}: {line}" for p in readers
             for line in _reexported(p.read_text(), sources)]
    found += [f"{name}: __all__ lists {n}" for name, source in sources.items()
              for n in _exported_not_defined(source)]
    assert found == []


def test_the_reexport_finder_sees_a_second_path() -> None:
    # Guards the test above with a made-up pair of modules.
    modules = {"pkg.owner": "X = 1\ndef f():\n    pass\n",
               "pkg.front": "from pkg.owner import X, f\nY = X\n__all__ = ['X', 'Y']\n",
               "pkg": "", "pkg.sub": ""}
    reader = "from pkg.front import X, Y\nfrom pkg.owner import f\nfrom pkg import sub\n"
    assert _reexported(reader, modules) == ["from pkg.front import X"]
    assert _exported_not_defined(modules["pkg.front"]) == ["X"]


# --- the layout (issue 29): folders a newcomer can read ------------------------------------

MAX_MODULES_PER_FOLDER = 14
MAX_DEFINITIONS = 20
# Modules still over MAX_DEFINITIONS, each with the count it may not grow past: a debt to pay
# down, not a licence. An entry is removed once its module is split under the limit.
OVER_DEFINITIONS: dict[str, int] = {}


def _folders() -> dict[Path, list[Path]]:
    """Each package folder of ours -> its modules (`__init__.py` not counted)."""
    return {d: sorted(f for f in d.glob("*.py") if f.name != "__init__.py")
            for pkg in PACKAGES for d in [ROOT / pkg, *(ROOT / pkg).rglob("*")]
            if d.is_dir() and (d / "__init__.py").exists()}


def test_no_package_folder_holds_more_than_fourteen_modules() -> None:
    crowded = {str(d.relative_to(ROOT)): len(m) for d, m in _folders().items()
               if len(m) > MAX_MODULES_PER_FOLDER}
    assert crowded == {}


def test_no_module_grows_past_its_definitions_limit() -> None:
    counts = {name: len(_defined(path.read_text())) for name, path in MODULES.items()}
    grown = {m: n for m, n in counts.items() if n > OVER_DEFINITIONS.get(m, MAX_DEFINITIONS)}
    paid = sorted(m for m in OVER_DEFINITIONS if counts.get(m, 0) <= MAX_DEFINITIONS)
    assert grown == {}
    assert paid == []  # split under the limit: take it off the list so it stays there


def test_a_package_init_is_its_docstring_only() -> None:
    # No re-exports, no second import path, nothing run at import: an __init__ says what its
    # folder owns and nothing more.
    busy = []
    for folder in _folders():
        init = folder / "__init__.py"
        body = ast.parse(init.read_text()).body
        if body and not (len(body) == 1 and isinstance(body[0], ast.Expr)
                         and isinstance(body[0].value, ast.Constant)):
            busy.append(str(init.relative_to(ROOT)))
    assert busy == []


def _private_module_imports(graph: dict[str, set[str]]) -> list[str]:
    """Imports of a module named `_x` from outside the folder that holds it."""
    return sorted(f"{mod} -> {dep}" for mod, deps in graph.items() for dep in deps
                  if dep.rsplit(".", 1)[-1].startswith("_")
                  and mod.rsplit(".", 1)[0] != dep.rsplit(".", 1)[0])


def test_private_modules_are_imported_only_within_their_folder() -> None:
    assert _private_module_imports(_graph()) == []


def test_the_private_module_finder_sees_an_outside_import() -> None:
    graph = {"p.a.x": {"p.a._k"}, "p.b.y": {"p.a._k"}, "p.a._k": set()}
    assert _private_module_imports(graph) == ["p.b.y -> p.a._k"]


def test_test_folders_mirror_the_packages() -> None:
    # tests/<pkg>/<sub>/ exists only where <pkg>/<sub>/ does: a test is found beside its code.
    orphans = sorted(str(d.relative_to(ROOT)) for pkg in PACKAGES
                     for d in (ROOT / "tests" / pkg).rglob("*")
                     if d.is_dir() and d.name != "__pycache__"
                     and not (ROOT / d.relative_to(ROOT / "tests")).is_dir())
    assert orphans == []
