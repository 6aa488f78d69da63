"""The package's import rules, made executable (the layering the README describes).

Rules:
- the pure layers (``ahp.protocol``, ``ahp.vt``, ``ahp.reducers``; the engine's
  stage cores live in the last two; the agent layer's state machine, options,
  evidence rules and renderer) import neither Trio nor any module that does
  I/O or reads a clock, and call no I/O builtin (``open``, ``print``, ``input``);
- the agent layer imports neither the engine, the server, the client nor MCP
  (both terminals reach it through its port), and the pty layer not the agent;
- the engine imports neither the server nor the client (nor recording);
- the client imports neither the engine nor the server (nor the CLI, MCP, the bench);
- recording (``ahp.record``) imports the engine and the protocol, nothing above them;
  its asciicast codec is a pure module;
- the pty layer imports nothing above it (engine, server, client);
- there is no import cycle between modules of ``ahp``: every import counts, also
  one inside a function (a lazy import that closes a cycle is still a cycle), but
  not one under ``if TYPE_CHECKING:`` (annotations only; the layering rules above
  still count those);
- nor a cycle of annotations: counting the imports under ``if TYPE_CHECKING:``
  too (but not those of a package's ``__init__``, which only declare its lazy
  exports), no modules import each other.

Test rules: the import graph is read from the source (``ast``), so an import
inside a function cannot hide; the pure layers are also imported in a fresh
interpreter, so that whatever they load at run time is seen too.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ahp"

#: Stdlib and third-party modules that do I/O, read a clock or schedule tasks.
IO_MODULES = frozenset(
    {
        "asyncio",
        "fcntl",
        "io",
        "os",
        "pathlib",
        "pty",
        "select",
        "selectors",
        "shutil",
        "signal",
        "socket",
        "ssl",
        "subprocess",
        "sys",
        "termios",
        "threading",
        "time",
        "trio",
        "trio_websocket",
        "wsproto",
    }
)
#: What importing a pure layer must not load at all, whoever imports it.
RUNTIME_FORBIDDEN = frozenset(
    {"trio", "trio_websocket", "wsproto", "socket", "fcntl", "termios", "pty", "asyncio"}
)
IO_BUILTINS = frozenset({"open", "print", "input"})
#: The client's protocol state machine is held to the same rule as the server's cores.
PURE_PACKAGES = (
    "ahp.protocol",
    "ahp.vt",
    "ahp.reducers",
    "ahp.record.asciicast",
    "ahp.client.session",
    "ahp.client.mirror",
    "ahp.client.errors",
    "ahp.exports",
    "ahp.arguments",
    "ahp.version",
)
#: The agent layer's pure modules (the rest of ``ahp.agent`` runs on Trio): the
#: state machine and its table, the options, the evidence rules, the renderer.
PURE_AGENT_MODULES = (
    "ahp.agent.status",
    "ahp.agent.machine",
    "ahp.agent.options",
    "ahp.agent.evidence",
    "ahp.agent.markers",
    "ahp.agent.line",
    "ahp.agent.render",
    "ahp.agent.budget",
)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


MODULES = _modules()


def _resolve(module: str, level: int, current: str, is_package: bool) -> str:
    if level == 0:
        return module
    base = current.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: -(level - 1)]
    return ".".join([*base, module] if module else base)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes inside ``if TYPE_CHECKING:`` blocks."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                inside.update(id(n) for n in ast.walk(stmt))
    return inside


def _imports(name: str, *, typing_only: bool = True) -> Iterator[tuple[str, int]]:
    """Every module ``name`` imports (absolute names; ``from pkg import sub`` is ``pkg.sub``
    when ``sub`` is a module), with the line; ``typing_only=False`` skips imports under
    ``if TYPE_CHECKING:``."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    skip = set() if typing_only else _type_checking_nodes(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(node.module or "", node.level, name, is_package)
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES]
            if subs:
                yield from ((s, node.lineno) for s in subs)
                if len(subs) < len(node.names):
                    yield target, node.lineno
            else:
                yield target, node.lineno


def _in(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _pure(name: str) -> bool:
    return any(_in(name, p) for p in PURE_PACKAGES) or name in PURE_AGENT_MODULES


def _pure_modules() -> list[str]:
    return [m for m in MODULES if _pure(m)]


def test_the_module_walk_sees_the_layers() -> None:
    for required in ("ahp.protocol.codec", "ahp.vt.scanner", "ahp.reducers.terminal"):
        assert required in MODULES


@pytest.mark.parametrize("name", _pure_modules())
def test_pure_layers_import_no_io(name: str) -> None:
    bad = [
        (target, line)
        for target, line in _imports(name)
        if target.split(".")[0] in IO_MODULES or (_in(target, "ahp") and not _pure(target))
    ]
    assert bad == [], f"{name} imports I/O or an impure layer"
    tree = ast.parse(MODULES[name].read_text())
    calls = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in IO_BUILTINS
    ]
    assert calls == [], f"{name} calls an I/O builtin at lines {calls}"


def test_pure_layers_load_no_io_at_run_time() -> None:
    probe = (
        "import importlib, json, sys\n"
        "before = set(sys.modules)\n"
        f"for name in {_pure_modules()!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    loaded = json.loads(result.stdout)
    # The interpreter and attrs/cattrs load os, io, pathlib, threading themselves; the
    # source check above covers our own imports of them.
    assert not [m for m in loaded if m.split(".")[0] in RUNTIME_FORBIDDEN]
    impure = [m for m in loaded if _in(m, "ahp") and not _pure(m)]
    # The root package's exports are lazy, and so are ahp.record's (the parent package
    # of the pure ahp.record.asciicast), ahp.client's (of the pure client session) and
    # ahp.agent's (of the pure state machine).
    assert set(impure) <= {"ahp", "ahp.record", "ahp.client", "ahp.agent"}


@pytest.mark.parametrize(
    ("layer", "forbidden"),
    [
        ("ahp.engine", ("ahp.server", "ahp.client", "ahp.cli", "ahp.bench", "ahp.record")),
        ("ahp.record", ("ahp.server", "ahp.client", "ahp.cli", "ahp.bench", "ahp.mcp")),
        (
            "ahp.pty",
            ("ahp.agent", "ahp.engine", "ahp.server", "ahp.client", "ahp.cli", "ahp.bench"),
        ),
        (
            "ahp.agent",
            ("ahp.engine", "ahp.server", "ahp.client", "ahp.cli", "ahp.bench", "ahp.mcp"),
        ),
        ("ahp.server", ("ahp.client", "ahp.cli", "ahp.bench")),
        ("ahp.client", ("ahp.engine", "ahp.server", "ahp.cli", "ahp.bench", "ahp.mcp")),
    ],
)
def test_layers_import_nothing_above_them(layer: str, forbidden: tuple[str, ...]) -> None:
    bad = [
        (name, target, line)
        for name in MODULES
        if _in(name, layer)
        for target, line in _imports(name)
        if any(_in(target, f) for f in forbidden)
    ]
    assert bad == []


def test_no_import_cycles() -> None:
    graph = {
        name: sorted(
            {t for t, _ in _imports(name, typing_only=False) if t in MODULES and t != name}
        )
        for name in MODULES
    }
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in graph:
        if node not in state:
            visit(node)
    assert cycles == []


def _strongly_connected(graph: dict[str, list[str]]) -> list[frozenset[str]]:
    """The groups of more than one module that reach each other (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[frozenset[str]] = []
    for root, edges_of_root in graph.items():
        if root in index:
            continue
        work = [(root, iter(edges_of_root))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(frozenset(group))
    return groups


def test_strongly_connected_finds_a_cycle_and_nothing_else() -> None:
    graph = {"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": [], "e": ["e"]}
    assert _strongly_connected(graph) == [frozenset({"a", "b", "c"})]


def test_no_annotation_cycles() -> None:
    """Not even under ``if TYPE_CHECKING:`` do modules name each other in a circle."""
    graph = {
        name: sorted(
            {
                t
                for t, _ in _imports(name, typing_only=path.name != "__init__.py")
                if t in MODULES and t != name
            }
        )
        for name, path in MODULES.items()
    }
    assert _strongly_connected(graph) == []


#: File names docstrings and comments mention that are not the repository's: a
#: user's files and examples of arguments.
NOT_OURS = frozenset({"script.zsh", "config.fish", "t.cast", "directory/workload.txt"})
_CITED = re.compile(
    r"(?<![\w/.~-])((?:[\w-]+/)*[\w.-]+\.(?:md|py|sh|zsh|fish|toml|json|c|txt|cast))\b"
)


def test_docstrings_cite_files_that_exist() -> None:
    """Issue 20, item 8: a docstring or comment that names a file names one in the
    repository (by a path some file's path ends with, or by a name some file has)."""
    files = [p for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts]
    names = {p.name for p in files}
    paths = {p.relative_to(ROOT).as_posix() for p in files}
    missing = []
    for name, path in MODULES.items():
        source = path.read_text()
        tree = ast.parse(source)
        texts = [
            doc
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and (doc := ast.get_docstring(node))
        ]
        texts += [line for line in source.splitlines() if line.strip().startswith("#")]
        for text in texts:
            for cited in _CITED.findall(text):
                known = (
                    any(p == cited or p.endswith("/" + cited) for p in paths)
                    if "/" in cited
                    else cited in names
                )
                if not known and cited not in NOT_OURS:
                    missing.append((name, cited))
    assert missing == []
