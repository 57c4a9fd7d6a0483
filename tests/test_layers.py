"""The layers (docs/design.md, "Layers"): every module imports only its own layer and
the layers below it, and no two modules import each other when they are imported.

The imports are read from the source (``ast``), so nothing is imported to check
them. For the direction every ``import`` counts: the ones inside functions and the
ones under ``if TYPE_CHECKING:`` (an annotation names what a module depends on),
but not ``from fusionworker import __version__`` (a literal in the package root).
For the cycles at import time only the imports that run when a module is imported
count. ``python -m tests.test_layers`` prints the layer graph, the upward imports
and every cycle.

The same ``ast`` walk checks that the parts keep to their rooms: no object reads
another object's private attribute, and no module assigns another module's globals.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "fusionworker"

#: bottom to top; a module may import its own layer and the ones before it
LAYERS = ("core", "events", "middleware", "runtime", "ops", "web", "cli", "face")

#: modules outside a layer folder, and their layer
PLACED = {
    "fusionworker.exceptions": "core",      # its classes' qualified names are configuration
                                            # (FUSIONWORKER_RETRYABLE)
    "fusionworker.worker": "runtime",       # the worker's public names (runtime/ re-exported)
    "fusionworker.testing": "face",         # public: runs a worker in the test process
    "fusionworker": "face",                 # lazy public names (strings, PEP 562)
    "fusionworker.__main__": "cli",         # `python -m fusionworker`: the command line
}

#: the upward imports there are (TYPE_CHECKING ones too), each with its reason; a new
#: one fails the test. None: the producer reaches the event log through the port it is
#: handed (core/emitting.py), not an import
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}

#: cycles that exist only through imports inside functions (each inside one layer);
#: a new one fails the test. None: the core's parts below ``Queue`` make one through the
#: class they are handed (core/queue_port.py), and the table of registered functions
#: (core/catalog.py) lies below the options and the enqueue that read it
KNOWN_DEFERRED_CYCLES: set[frozenset[str]] = set()

#: cycles that exist only once the ``if TYPE_CHECKING:`` imports count (an annotation
#: names a module that imports the annotating one); a new one fails the test. None:
#: Queue's parts and what is handed a queue name the ``QueueView`` protocol
#: (core/queue_view.py), the exceptions that carry a job the ``JobView`` protocol
#: (core/job_view.py), and the job's RQ part (job_habits.py) gives back ``Self``
KNOWN_TYPING_CYCLES: set[frozenset[str]] = set()

#: reads of another object's private attribute there are, each with its reason
ALLOWED_PRIVATE = {
    ("fusionworker.runtime.wakeups", "conn._sock"):
        "redis-py has no public accessor for a pub/sub connection's socket, which the "
        "loop's select() waits on",
    ("fusionworker.runtime.stops", "conn._sock"): "the same, for the stop requests' connection",
    ("fusionworker.core.batch", "self.queue._register"):
        "a batch registers its queue as the queue itself does (queue.py's private helper)",
    # enqueue.py and queue_read.py are Queue's own parts, split out of queue.py: they act
    # on the queue's state as its methods did
    ("fusionworker.core.enqueue", "job._queue"): "a Job keeps the Queue that made it",
    ("fusionworker.core.queue_read", "job._queue"): "a Job keeps the Queue that read it",
    ("fusionworker.core.enqueue", "p.batch._added"):
        "the queue counts the jobs it added to a batch under construction",
    ("fusionworker.core.enqueue", "q._emit"): "the queue's event emission, per enqueue",
    ("fusionworker.core.enqueue", "q._events"): "whether the queue emits events",
    ("fusionworker.core.enqueue", "q._made_defaults"): "the queue's defaults, made once",
    ("fusionworker.core.enqueue", "q._register"): "the queue registers itself once",
    ("fusionworker.core.enqueue", "q._script_events"):
        "whether enqueue_many.lua writes the events itself",
    ("fusionworker.core.tracing", "queue_class._fw_plain"):
        "instrument()/uninstrument() wrap Queue.enqueue_call and keep the plain one",
}

#: another module's globals a module assigns, each with its reason
ALLOWED_GLOBAL_WRITES: dict[tuple[str, str], str] = {
    ("fusionworker.runtime.horse.joblog", "logging.lastResort"):
        "Python's documented hook for records that no handler takes: job code's log lines "
        "go to the worker's log when nothing configured logging (in the fork server only)",
}


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str:
    if module in PLACED:
        return PLACED[module]
    layer = module.split(".")[1]
    if layer not in LAYERS:
        raise AssertionError(f"{module}: in no layer (put it in a layer folder or PLACED)")
    return layer


def _type_checking_lines(tree: ast.AST) -> set[int]:
    """Line numbers inside ``if TYPE_CHECKING:`` blocks."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports_of(path: Path, modules: set[str], root: Path = PACKAGE,
               typing_only: bool = False) -> list[tuple[str, bool]]:
    """(imported module of the package, imported at import time) for every import in
    ``path`` that runs, resolving ``from pkg import submodule`` to the submodule;
    ``typing_only``: the imports under ``if TYPE_CHECKING:`` instead (never run)."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_lines(tree)
    top_level = {id(node) for node in tree.body}
    for node in tree.body:       # also a module's own top-level try/if blocks
        if isinstance(node, (ast.If, ast.Try)):
            top_level.update(id(n) for n in ast.walk(node))
    found: list[tuple[str, bool]] = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)) or (node.lineno in skip) != typing_only:
            continue
        now = id(node) in top_level
        if isinstance(node, ast.Import):
            found += [(a.name, now) for a in node.names if a.name.split(".")[0] == root.name]
            continue
        assert isinstance(node, ast.ImportFrom)
        if node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        if target.split(".")[0] != root.name:
            continue
        for alias in node.names:
            if target == root.name and alias.name == "__version__":
                continue      # a literal in the package root, read by every layer
            sub = f"{target}.{alias.name}"
            found.append((sub if sub in modules else target, now))
    return found


def import_graph(root: Path = PACKAGE, typing_only: bool = False
                 ) -> dict[str, list[tuple[str, bool]]]:
    paths = sorted(root.rglob("*.py"))
    modules = {module_name(p, root) for p in paths}
    return {module_name(p, root): imports_of(p, modules, root, typing_only) for p in paths}


def full_graph(root: Path = PACKAGE) -> dict[str, list[tuple[str, bool]]]:
    """Every import, TYPE_CHECKING ones too (as not at import time): the dependencies."""
    graph = import_graph(root)
    for src, edges in import_graph(root, typing_only=True).items():
        graph[src] = graph[src] + [(dst, False) for dst, _ in edges]
    return graph


def cross_layer_cycles(graph: dict[str, list[tuple[str, bool]]]) -> list[frozenset[str]]:
    """The cycles through modules of more than one layer. An allowed upward import
    (deferred, listed with its reason) is the one sanctioned way up: a loop closed only
    by it is no cycle across layers."""
    edges = _edges(graph, at_import_only=False)
    for src, dst in ALLOWED_UPWARD:
        edges[src].discard(dst)
    return [c for c in cycles(edges) if len({layer_of(m) for m in c}) > 1]


def upward_imports(graph: dict[str, list[tuple[str, bool]]]) -> list[tuple[str, str]]:
    rank = {layer: i for i, layer in enumerate(LAYERS)}
    return sorted({(src, dst) for src, edges in graph.items() for dst, _ in edges
                   if rank[layer_of(dst)] > rank[layer_of(src)]})


def cycles(graph: dict[str, Iterable[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _edges(graph: dict[str, list[tuple[str, bool]]], at_import_only: bool) -> dict[str, set[str]]:
    return {src: {dst for dst, now in edges if dst != src and (now or not at_import_only)}
            for src, edges in graph.items()}


#: ``_name_`` (an enum's own protocol), ``__name__``, and a named tuple's documented
#: methods and fields (``_make``, ``_fields``, ...): not private
_NOT_PRIVATE = re.compile(r"_[A-Za-z0-9]+_|__\w+__|_make|_fields|_replace|_asdict|_field_defaults")


def _module_names(tree: ast.AST, package: str, modules: set[str]) -> set[str]:
    """The names a module binds to modules: ``import x`` (any) and ``from p import m``
    where ``p.m`` is a module of the package."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            names.update(a.asname or a.name for a in node.names
                         if f"{target}.{a.name}" in modules)
    return names


def rooms(root: Path = PACKAGE) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(module, expression) of every read of another object's private attribute
    (``x._y`` with ``x`` not ``self``/``cls``, not a name imported from the standard
    library or a dependency, not ``super()``), and of every assignment to another module's global
    (``mod.name = ...``, ``del mod.name``)."""
    paths = sorted(root.rglob("*.py"))
    modules = {module_name(p, root) for p in paths}
    private: set[tuple[str, str]] = set()
    writes: set[tuple[str, str]] = set()
    for path in paths:
        name = module_name(path, root)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        mods = _module_names(tree, package, modules)
        outside = {(a.asname or a.name).split(".")[0] for node in ast.walk(tree)
                   if isinstance(node, ast.Import) for a in node.names
                   if a.name.split(".")[0] != root.name}
        outside |= {a.asname or a.name for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and not node.level
                    and (node.module or "").split(".")[0] != root.name for a in node.names}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") \
                    and not _NOT_PRIVATE.fullmatch(node.attr):
                base = node.value
                if isinstance(base, ast.Name) and base.id in {"self", "cls", *outside}:
                    continue
                if isinstance(base, ast.Call) and ast.unparse(base.func) == "super":
                    continue
                private.add((name, ast.unparse(node)))
            targets: list[ast.expr] = []
            if isinstance(node, (ast.Assign, ast.Delete)):
                targets = list(node.targets)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            for target in targets:
                for t in (target.elts if isinstance(target, ast.Tuple) else [target]):
                    if (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                            and t.value.id in mods):
                        writes.add((name, ast.unparse(t)))
    return private, writes


# ------------------------------------------------------------------------------- tests


def test_no_part_reads_another_objects_private_attribute():
    private, _ = rooms()
    assert private - set(ALLOWED_PRIVATE) == set(), "private attributes read from outside"
    assert set(ALLOWED_PRIVATE) - private == set(), "gone: drop it from ALLOWED_PRIVATE"


def test_no_module_assigns_another_modules_globals():
    _, writes = rooms()
    assert writes - set(ALLOWED_GLOBAL_WRITES) == set(), "another module's globals assigned"
    assert set(ALLOWED_GLOBAL_WRITES) - writes == set(), "gone: drop it from the list"


def test_the_room_checks_find_a_private_read_and_a_global_write(tmp_path):
    """The two checks above can fail: a made-up package with both faults."""
    root = tmp_path / "fusionworker"
    (root / "core").mkdir(parents=True)
    for init in (root / "__init__.py", root / "core" / "__init__.py"):
        init.write_text("")
    (root / "core" / "a.py").write_text("import os\nflag = 1\n")
    (root / "core" / "b.py").write_text(
        "import os\nfrom . import a\n"
        "class B:\n    def f(self, other):\n        os._exit(self._x + other._y)\n"
        "a.flag = 2\n")
    private, writes = rooms(root)
    assert private == {("fusionworker.core.b", "other._y")}
    assert writes == {("fusionworker.core.b", "a.flag")}


def test_every_module_imports_only_its_layer_and_the_layers_below():
    graph = full_graph()
    assert len(graph) > 50                       # the whole package was read
    upward = [edge for edge in upward_imports(graph) if edge not in ALLOWED_UPWARD]
    assert upward == [], "upward imports (see docs/design.md, Layers):\n" + "\n".join(
        f"  {src} ({layer_of(src)}) -> {dst} ({layer_of(dst)})" for src, dst in upward)


def test_no_cycle_across_layers_counting_every_import():
    """TYPE_CHECKING imports included: the hook contract points down, not up."""
    assert cross_layer_cycles(full_graph()) == []


def test_the_allowed_upward_imports_still_exist_and_are_deferred():
    graph = import_graph()
    for src, dst in ALLOWED_UPWARD:
        edges = [now for target, now in graph[src] if target == dst]
        assert edges and not any(edges), f"{src} -> {dst}: gone, or imported at import time"


def test_no_import_cycle_at_import_time():
    found = cycles(_edges(import_graph(), at_import_only=True))
    assert found == [], f"modules that import each other at import time: {found}"


def test_cycles_through_deferred_imports_are_the_known_ones():
    # an allowed upward import (deferred, listed with its reason) is the one sanctioned way
    # up: a loop closed only by it (core.queue -> events -> core.job -> core.queue) is no
    # cycle of core's own
    edges = _edges(import_graph(), at_import_only=False)
    for src, dst in ALLOWED_UPWARD:
        edges[src].discard(dst)
    found = set(cycles(edges))
    assert found - KNOWN_DEFERRED_CYCLES == set(), "new cycle(s) through deferred imports"
    assert KNOWN_DEFERRED_CYCLES - found == set(), "a known cycle went away: drop it here"
    for cycle in found:       # each one stays inside its layer
        assert len({layer_of(m) for m in cycle}) == 1, cycle


def test_cycles_counting_type_checking_imports_are_the_known_ones():
    """Every import counted, TYPE_CHECKING ones too: an annotation names a dependency."""
    found = set(cycles(_edges(full_graph(), at_import_only=False)))
    assert found - KNOWN_TYPING_CYCLES == set(), "new or larger cycle(s) counting every import"
    assert KNOWN_TYPING_CYCLES - found == set(), "a known cycle shrank or went away: update it"


def test_the_checker_finds_an_upward_import_and_a_cycle(tmp_path):
    """The checks above can fail: a made-up package with both faults."""
    root = tmp_path / "fusionworker"
    for folder in ("core", "ops"):
        (root / folder).mkdir(parents=True)
        (root / folder / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "core" / "a.py").write_text("from . import b\n")
    (root / "core" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nfrom .a import x\n"
        "if TYPE_CHECKING:\n    from ..ops import tool\n"
        "def f():\n    from ..ops.tool import y\n")
    (root / "ops" / "tool.py").write_text("from ..core import a\n")
    graph = import_graph(root)
    assert upward_imports(graph) == [("fusionworker.core.b", "fusionworker.ops.tool")]
    assert ("fusionworker.ops.tool", False) in graph["fusionworker.core.b"]   # deferred
    assert len(graph["fusionworker.core.b"]) == 2                # TYPE_CHECKING left out
    assert cycles(_edges(graph, at_import_only=True)) == [
        frozenset({"fusionworker.core.a", "fusionworker.core.b"})]


def main() -> None:
    graph = import_graph()
    full = full_graph()
    counts: dict[tuple[str, str], int] = {}
    for src, edges in full.items():
        for dst, _ in edges:
            pair = (layer_of(src), layer_of(dst))
            if pair[0] != pair[1]:
                counts[pair] = counts.get(pair, 0) + 1
    print("layer -> layers it imports (number of import statements, TYPE_CHECKING too)")
    for layer in reversed(LAYERS):
        used = [f"{dst} ({n})" for (src, dst), n in sorted(
            counts.items(), key=lambda kv: LAYERS.index(kv[0][1])) if src == layer]
        print(f"  {layer:<10} -> {', '.join(used) or '-'}")
    print("upward imports (TYPE_CHECKING ones too):")
    for src, dst in upward_imports(full):
        print(f"  {src} -> {dst}: {ALLOWED_UPWARD.get((src, dst), 'NOT LISTED')}")
    print("cycles across layers (every import):", cross_layer_cycles(full) or "none")
    print("cycles at import time:", cycles(_edges(graph, at_import_only=True)) or "none")
    print("cycles through deferred imports (inside one layer):")
    edges = _edges(graph, at_import_only=False)
    for src, dst in ALLOWED_UPWARD:       # the sanctioned way up closes no cycle
        edges[src].discard(dst)
    for cycle in cycles(edges):
        print("  " + ", ".join(sorted(cycle)))
    print("cycles counting every import (TYPE_CHECKING ones too):")
    for cycle in cycles(_edges(full, at_import_only=False)):
        print(f"  {len(cycle)} modules: " + ", ".join(sorted(cycle)))


if __name__ == "__main__":
    main()
