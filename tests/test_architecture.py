"""The import rules of the package (docs/architecture.md), read from the source with ``ast``.

An import anywhere in a module is an edge, inside a function too (a function-local import keeps the
dependency it hides); only imports under ``if TYPE_CHECKING:`` are not (nothing runs them), except
for the core's rule, which counts them as well. ``from otelguard import X`` is an edge to the module
the lazy package namespace loads ``X`` from.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from functools import cache
from pathlib import Path

import otelguard

PACKAGE_DIR = Path(otelguard.__file__).parent

CORE_PACKAGES = ("otelguard.core", "otelguard.config")
"""The guard itself (its detectors, decisions, sessions and cap ledger) and its configuration."""


def _in_core(module: str) -> bool:
    return module == "otelguard.errors" or any(
        module == package or module.startswith(f"{package}.") for package in CORE_PACKAGES
    )


OUTER = (
    "telemetry",
    "state",
    "hosting",
    "serving",
    "claude_code",
    "readers",
    "replay",
    "backtest",
    "bench",
    "integrations",
    "demo",
    "cli",
    "testing",
)
"""Packages and modules built on the core; the core imports none of them."""

MAX_DEPTH = 7
"""The core's own longest chain is five steps (``core.guard`` to ``core.session_keys``, four); the
public ``Guard`` sits above it in ``otelguard.hosting``, beside the session host it also builds."""
MAX_ROOT_MODULES = 15
HEAVY = ("rich", "opentelemetry.sdk", "prometheus_client", "redis")
EDGE_LIBRARIES = ("opentelemetry", "prometheus_client", "redis", "rich", "h11")
"""Third-party packages the core imports nowhere, not even inside a function or for the type checker."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE_DIR.rglob("*.py"))}


@cache
def _core() -> frozenset[str]:
    return frozenset(module for module in _modules() if _in_core(module))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.Module, *, in_functions: bool = True) -> list[ast.Import | ast.ImportFrom]:
    """Every import that can run: at module level, in functions and classes, under ``try``/``if``;
    not those under ``if TYPE_CHECKING:`` (nor, without ``in_functions``, those in a function)."""
    found: list[ast.Import | ast.ImportFrom] = []
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            pending.extend(node.orelse)
        elif not in_functions and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        else:
            pending.extend(ast.iter_child_nodes(node))
    return found


def _lazy_homes(package: str) -> dict[str, str]:
    """Where a package that imports its names on first use (``_HOMES``) loads each from."""
    if package not in _modules() or _modules()[package].name != "__init__.py":
        return {}
    homes: dict[str, str] = getattr(importlib.import_module(package), "_HOMES", {})
    return homes


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    modules = _modules()
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in modules}
    base = node.module or ""
    if node.level:
        package = module if _modules()[module].name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    targets: set[str] = set()
    for alias in node.names:
        if f"{base}.{alias.name}" in modules:
            targets.add(f"{base}.{alias.name}")  # a submodule
        elif alias.name in _lazy_homes(base):
            targets.add(_lazy_homes(base)[alias.name])
        elif base in modules:
            targets.add(base)
    return targets


@cache
def _graph(*, in_functions: bool = True) -> dict[str, frozenset[str]]:
    """Each module's edges: what it imports (``in_functions=False``: what loading it loads)."""
    graph: dict[str, frozenset[str]] = {}
    for module, path in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        edges: set[str] = set()
        for node in _runtime_imports(tree, in_functions=in_functions):
            edges |= _targets(module, node)
        edges.discard(module)
        graph[module] = frozenset(edges)
    return graph


def _is_outer(module: str) -> bool:
    parts = module.split(".")
    return len(parts) > 1 and parts[1] in OUTER


def test_the_graph_sees_the_core() -> None:
    """The reader finds every core module and the imports between them (a broken reader finds none)."""
    graph = _graph()
    assert {
        "otelguard.core.guard",
        "otelguard.core.detectors",
        "otelguard.config",
        "otelguard.errors",
    } <= _core()
    assert _core() <= set(graph)
    assert "otelguard.core.pending_calls" in graph["otelguard.core.guard"]
    assert "otelguard.core.decisions" in graph["otelguard.core.observers"]
    assert "otelguard.core.tool_calls" in graph["otelguard.core.guard"]


def test_the_core_imports_nothing_built_on_it() -> None:
    """guard, detectors, caps, config, signatures, results, decisions, classify, observers, tool_calls,
    pending_calls, errors and sessions import nothing from telemetry, the state backends, the hosting
    resolvers, cli, replay, backtest, bench, integrations, demo or the servers: not at module level,
    not inside a function, not for the type checker."""
    offences = {module: sorted(t for t in _all_imports(module) if _is_outer(t)) for module in _core()}
    assert {m: t for m, t in offences.items() if t} == {}


def test_the_core_imports_no_edge_library() -> None:
    """No core module imports OpenTelemetry, prometheus_client, redis, rich or h11 anywhere in it
    (a function-local import included): the core is handed its observers and its cap backend."""
    users = {module for library in EDGE_LIBRARIES for module in _importers_of(library, everywhere=True)}
    assert sorted(users & _core()) == []


def test_a_function_local_import_is_an_edge() -> None:
    """The reader sees imports inside functions: the hosting module loads the Redis backend only when
    a config has a state URL, and that import is an edge of ``otelguard.hosting``."""
    assert "otelguard.state.redis_caps" in _graph()["otelguard.hosting"]
    assert "otelguard.state.redis_caps" not in _graph(in_functions=False)["otelguard.hosting"]


_STORING_METHODS = frozenset({"append", "add", "update", "extend", "insert", "put", "setdefault", "register"})


def _registrations(tree: ast.Module) -> list[str]:
    """Where a function keeps what its caller handed it in module state: assigns a parameter (or an
    expression of one) to a name it declares ``global``, or stores a parameter in a module-level
    container (``REGISTRY[k] = f``, ``HOOKS.append(f)``): the shape of a process-wide registry."""
    module_names = {
        target.id
        for node in tree.body
        for target in (node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)])
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(target, ast.Name)
    }
    found: list[str] = []
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        arguments = function.args
        params = {a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)}
        declared = {
            name for node in ast.walk(function) if isinstance(node, ast.Global) for name in node.names
        }

        def uses_param(node: ast.AST, params: set[str] = params) -> bool:
            return any(isinstance(n, ast.Name) and n.id in params for n in ast.walk(node))

        for node in ast.walk(function):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    named = target.id if isinstance(target, ast.Name) else None
                    if named in declared and uses_param(node.value):
                        found.append(f"{function.name}: global {named}")
                    held = target.value if isinstance(target, ast.Subscript) else None
                    if isinstance(held, ast.Name) and held.id in module_names and uses_param(node.value):
                        found.append(f"{function.name}: {held.id}[...]")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = node.func.value
                stored = node.args[1:] if node.func.attr in ("put", "setdefault", "insert") else node.args
                if (
                    node.func.attr in _STORING_METHODS
                    and isinstance(owner, ast.Name)
                    and owner.id in module_names
                    and any(isinstance(a, ast.Name) and a.id in params for a in stored)
                ):
                    found.append(f"{function.name}: {owner.id}.{node.func.attr}(...)")
    return found


def test_the_core_holds_no_registry() -> None:
    """The core is handed its edges (``otelguard.core.edges``) by whoever makes a guard: no core module
    keeps a function, observer or store its caller handed it in module state for later guards to look
    up, and the package's ``__init__`` registers nothing at import (it loads only the version)."""
    offences = {}
    for module in _core():
        tree = ast.parse(_modules()[module].read_text(encoding="utf-8"))
        if found := _registrations(tree):
            offences[module] = found
    assert offences == {}
    assert _graph(in_functions=False)["otelguard"] == frozenset({"otelguard._version"})
    # the reader finds the shape it looks for (a registry like the one the core once had)
    sample = "hook = None\ndef register(*, hook_for):\n    global hook\n    hook = hook_for\n"
    assert _registrations(ast.parse(sample)) == ["register: global hook"]
    sample = "HOOKS = []\ndef register(fn):\n    HOOKS.append(fn)\n"
    assert _registrations(ast.parse(sample)) == ["register: HOOKS.append(...)"]


STATE_GRAMMAR = (
    "redis://",
    "rediss://",
    "unix://",
    "+cluster",
    "ssl_cert_reqs",
    "ssl_ca_certs",
    "ssl_certfile",
)
"""What only a reader of the shared state's URL grammar writes: its schemes and its query keys."""
STATE_SCHEME_NAMES = frozenset({"redis", "rediss", "unix", "redis+cluster", "rediss+cluster"})
"""A string that is a scheme's name (or the client package's) and nothing else."""
HERMES_DIALECT = (
    "tool_loop_guardrails",
    "warnings_enabled",
    "non_interactive_hard_stop_enabled",
    "loop_caps",
    "max_web_searches",
    "idempotent_no_progress",
    "exact_failure_warn_after",
    "exact_failure_block_after",
    "same_tool_failure_halt_after",
    "no_progress_block_after",
)
"""hermes-agent's keys (``hard_stop_enabled`` is not among them: it is also the config's own property)."""


def _edge_knowledge(source: str) -> list[str]:
    """What in a module's source belongs to an edge: a string (docstrings too) holding a state URL
    scheme or query key or a hermes-agent key, an import of ``urllib``, a ``find_spec`` (whether a
    client library is installed)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [f"string {word!r}" for word in (*STATE_GRAMMAR, *HERMES_DIALECT) if word in node.value]
            if node.value in STATE_SCHEME_NAMES:
                found.append(f"string {node.value!r}")
        elif isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.split(".")[0] == "urllib"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "urllib":
            found.append(f"from {node.module} import")
        elif isinstance(node, ast.Attribute) and node.attr == "find_spec":
            found.append("find_spec")
    return found


def test_the_core_reads_no_state_url_nor_the_hermes_dialect() -> None:
    """The core's config holds a state URL as present (a non-empty string) and reads otelguard's own
    keys: a URL's grammar, the password file, whether redis-py is installed (``otelguard.state.urls``)
    and hermes-agent's dialect (``otelguard.integrations.hermes``) are the edges'. No core
    module, the session host included, names a URL scheme or query key, a hermes key, ``urllib`` or
    ``find_spec``."""
    offences = {}
    for module in _core():
        if found := _edge_knowledge(_modules()[module].read_text(encoding="utf-8")):
            offences[module] = sorted(set(found))
    assert offences == {}
    for edge in ("otelguard.state.urls", "otelguard.integrations.hermes"):
        assert _edge_knowledge(_modules()[edge].read_text(encoding="utf-8")), edge  # the reader sees them


def test_the_core_takes_observers_and_stores_not_telemetry() -> None:
    """The core's guard and session host take observers and edges, typed; ``telemetry=`` (``True``, a
    ``Telemetry``, a binder, an observer) is the public ``Guard``'s convenience, resolved in
    ``otelguard.hosting``."""
    import inspect

    from otelguard.core.guard import Guard as CoreGuard
    from otelguard.core.sessions import SessionHost
    from otelguard.hosting import Guard

    for made in (CoreGuard, SessionHost):
        assert "telemetry" not in inspect.signature(made).parameters, made
        assert "edges" in inspect.signature(made).parameters, made
    assert list(inspect.signature(Guard).parameters)[:2] == ["config", "telemetry"]
    assert otelguard.Guard is Guard and issubclass(Guard, CoreGuard)
    # (the config's ``telemetry`` is its section of settings, not a guard's telemetry)
    for module in sorted(m for m in _core() if m.startswith("otelguard.core.")):
        source = _modules()[module].read_text(encoding="utf-8")
        tree = ast.parse(source)
        params = [
            a.arg
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            for a in (*node.args.args, *node.args.kwonlyargs)
        ]
        assert "telemetry" not in params, module


def _reach(module: str, graph: dict[str, frozenset[str]]) -> set[str]:
    """Every module ``module`` may load through its imports, itself excluded."""
    seen: set[str] = set()
    pending = [module]
    while pending:
        for target in graph.get(pending.pop(), ()):
            if target not in seen:
                seen.add(target)
                pending.append(target)
    return seen


CLI_MAPPINGS = (
    "otelguard.coding_agents.claude_code",
    "otelguard.coding_agents.codex",
    "otelguard.coding_agents.gemini_cli",
)
"""Each coding-agent CLI's mapping, one module per CLI."""


def test_the_sidecar_imports_no_adapter() -> None:
    """``otelguard serve`` and the Claude Code hook mapping sit on the session host, as the adapters do:
    neither loads anything from ``otelguard.integrations``, directly or through another module."""
    graph = _graph()
    assert "otelguard.core.sessions" in _reach("otelguard.serving.sidecar", graph)
    for module in ("otelguard.serving.sidecar", *CLI_MAPPINGS):
        assert sorted(m for m in _reach(module, graph) if m.startswith("otelguard.integrations")) == []


def test_every_adapter_holds_its_sessions_through_the_session_host() -> None:
    """Each framework adapter, and the Claude Code mapping they share with the sidecar, imports the
    session host; none keeps a pool of its own."""
    graph = _graph()
    adapters = [
        m for m in graph if m.startswith("otelguard.integrations.") and not m.split(".")[-1].startswith("_")
    ]
    assert len(adapters) >= 5
    for module in [*adapters, *CLI_MAPPINGS, "otelguard.serving.sidecar"]:
        assert "otelguard.core.sessions" in _reach(module, graph), module
        source = _modules()[module].read_text(encoding="utf-8")
        assert "SessionPool" not in source and "OrderedDict" not in source, module


def _cycles(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return cycles


def test_no_import_cycles() -> None:
    """No module reaches itself through imports, function-local ones included."""
    assert _cycles(_graph()) == []


def test_no_import_cycles_through_type_only_imports() -> None:
    """Nor through the imports made for type checking alone: what one module needs of another that
    imports it is declared where neither imports the other (a ``Protocol``)."""
    graph: dict[str, frozenset[str]] = {}
    for module, path in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        edges: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges |= _targets(module, node)
        edges.discard(module)
        graph[module] = frozenset(edges)
    assert _cycles(graph) == []


def _depth(module: str, graph: dict[str, frozenset[str]], memo: dict[str, int]) -> int:
    if module not in memo:
        memo[module] = 1 + max((_depth(t, graph, memo) for t in graph.get(module, ())), default=-1)
    return memo[module]


def test_import_chains_from_the_package_root_are_short() -> None:
    """From ``otelguard`` (its public names included) no chain of the imports that loading a module
    runs is longer than seven steps (the core's own chains: five)."""
    graph = dict(_graph(in_functions=False))
    for package in ("otelguard", "otelguard.config"):
        graph[package] = graph[package] | frozenset(_lazy_homes(package).values())
    assert _depth("otelguard", graph, {}) <= MAX_DEPTH
    assert _depth("otelguard.core.guard", graph, {}) <= 4


def test_importing_otelguard_loads_nothing_heavy() -> None:
    """``python -X importtime -c "import otelguard"`` shows neither rich nor the OpenTelemetry SDK nor
    prometheus_client."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import otelguard"],
        capture_output=True,
        text=True,
        check=True,
        cwd=PACKAGE_DIR.parent,
    )
    loaded = {line.rpartition("|")[2].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "otelguard" in loaded
    heavy = sorted(name for name in loaded if any(name == h or name.startswith(f"{h}.") for h in HEAVY))
    assert heavy == []


def test_the_guard_loads_without_telemetry() -> None:
    """A guard without telemetry runs a call without loading OpenTelemetry, prometheus_client or rich."""
    code = (
        "import sys\n"
        "from otelguard import Guard\n"
        "g = Guard(); g.before_call('read_file', {'p': 1}); g.after_call('read_file', {'p': 1}, 'x')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('rich', 'opentelemetry', 'prometheus_client')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PACKAGE_DIR.parent
    )
    assert done.stdout.strip() == "[]"


def test_only_the_cli_imports_rich() -> None:
    """Tables and colours are the command line's: no module outside ``otelguard.cli`` imports rich."""
    users = []
    for module, path in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == "rich" or n.startswith("rich.") for n in names):
                users.append(module)
    assert sorted(m for m in set(users) if not m.startswith("otelguard.cli")) == []
    assert "otelguard.cli.replay_tables" in users


def _importers_of(package: str, *, everywhere: bool = False) -> set[str]:
    """Modules that import ``package`` anywhere (module level or inside a function; with
    ``everywhere``, under ``TYPE_CHECKING`` too)."""
    users = set()
    for module, path in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree) if everywhere else _runtime_imports(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            if any(n == package or n.startswith(f"{package}.") for n in names):
                users.add(module)
    return users


def test_only_the_state_backend_imports_redis() -> None:
    """The redis client is the shared-state backend's (``otelguard.state``); the core never reaches
    that backend: the hosting resolvers pick it, and only when a URL is configured."""
    assert {m for m in _importers_of("redis") if not m.startswith("otelguard.state.")} == set()
    assert "otelguard.state.redis_caps" in _importers_of("redis")
    assert _importers_of("otelguard.state", everywhere=True) & _core() == set()
    assert "otelguard.hosting" in _importers_of("otelguard.state.redis_caps")


def _all_imports(module: str) -> set[str]:
    """Every otelguard module ``module`` imports anywhere: module level, in functions, under
    ``TYPE_CHECKING``."""
    tree = ast.parse(_modules()[module].read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found |= _targets(module, node)
    return found


def test_the_guard_and_its_wrappers_do_not_import_each_other() -> None:
    """``guard.call``/``guard.wrap`` live in ``tool_calls``, which knows the guard only as the
    ``CallGuard`` protocol: no import of ``guard`` at all, not even for the type checker."""
    assert "otelguard.core.tool_calls" in _all_imports("otelguard.core.guard")
    assert "otelguard.core.guard" not in _all_imports("otelguard.core.tool_calls")
    assert "otelguard.core.guard" not in _all_imports("otelguard.core.scripted")


def test_the_error_module_imports_nothing_of_the_package() -> None:
    """Every module may raise otelguard's errors, so ``errors`` imports no otelguard module at all,
    not even for the type checker (``GuardHalted.decision`` is typed by a protocol)."""
    assert _all_imports("otelguard.errors") == set()


def test_product_code_does_not_import_the_testing_helpers() -> None:
    """Replay, the demo, the bench and the command line drive the guard through
    ``otelguard.core.scripted``; ``otelguard.testing`` is for tests of a user's own loop, and nothing
    in the package imports it."""
    assert _importers_of("otelguard.testing") == set()
    drivers = {"otelguard.replay.runner", "otelguard.demo.simulation", "otelguard.bench.workloads"}
    assert drivers <= _importers_of("otelguard.core.scripted")


MAX_TELEMETRY_CLASS_LINES = 250


def test_no_telemetry_class_is_over_250_lines() -> None:
    """Each class of ``otelguard.telemetry`` holds one concern (the spans, the Prometheus metrics, the
    OTel metrics of a guard are observers of their own), within 250 lines, its first line to its last."""
    sizes = {
        f"{module}.{node.name}": (node.end_lineno or node.lineno) - node.lineno + 1
        for module, path in _modules().items()
        if module.startswith("otelguard.telemetry")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef)
    }
    assert "otelguard.telemetry.spans.SpanTelemetry" in sizes
    assert {name: size for name, size in sizes.items() if size > MAX_TELEMETRY_CLASS_LINES} == {}


MAX_CORE_CLASS_LINES = 300
MAX_DECISION_PATH_IFS = 8
DECISION_PATH = (
    "otelguard.core.guard",
    "otelguard.core.model_turns",
    "otelguard.core.token_caps",
    "otelguard.core.caps",
    "otelguard.core.tree",
    "otelguard.core.detectors.",
)


def test_no_core_class_is_over_300_lines() -> None:
    """The core's classes hold one concern each (the guard, a turn's detector state, a cap ledger),
    within 300 lines, their first line to their last: a detector is an object of its own module."""
    sizes = {
        f"{module}.{node.name}": (node.end_lineno or node.lineno) - node.lineno + 1
        for module, path in _modules().items()
        if module.startswith("otelguard.core.")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef)
    }
    assert "otelguard.core.guard.Guard" in sizes and "otelguard.core.detectors.turn.TurnDetectors" in sizes
    assert {name: size for name, size in sizes.items() if size > MAX_CORE_CLASS_LINES} == {}


def test_no_function_of_the_decision_path_has_more_than_8_ifs() -> None:
    """The decision path (the guard, the caps, the tree, the detectors) walks its gates and detectors
    in the order ``detectors/precedence.py`` declares instead of laddering them: no function of it
    holds more than 8 ``if`` statements (an ``elif`` is one more)."""
    counts = {
        f"{module}.{node.name}": sum(isinstance(inner, ast.If) for inner in ast.walk(node))
        for module, path in _modules().items()
        if module.startswith(DECISION_PATH)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    assert (
        "otelguard.core.guard.before_call" in counts
        and "otelguard.core.detectors.turn.record_after" in counts
    )
    assert {name: count for name, count in counts.items() if count > MAX_DECISION_PATH_IFS} == {}


def test_the_package_runs_no_generated_code_and_looks_up_no_module() -> None:
    """No ``exec`` or ``eval`` of source, and no ``sys.modules`` look-up: what a module
    uses it imports or is handed."""
    found = []
    for module, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("exec", "eval")
            ):
                found.append(f"{module}:{node.lineno} {node.func.id}")
            elif isinstance(node, ast.Attribute) and node.attr == "modules" and _names_sys(node.value):
                found.append(f"{module}:{node.lineno} sys.modules")
    assert found == []


def _names_sys(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "sys"


def test_the_package_root_holds_few_modules() -> None:
    """The root of the package holds its entry points and the modules every layer shares; the rest
    lives in folders named for what they are (core, config, serving, readers, ...)."""
    root = sorted(path.name for path in PACKAGE_DIR.glob("*.py"))
    assert "__init__.py" in root
    assert len(root) <= MAX_ROOT_MODULES, root


def test_everything_the_guard_loads_is_core() -> None:
    """The module defining ``Guard``, and every module it reaches at any depth (function-local imports
    included), is core: none of telemetry, state backends, servers, readers, adapters or the CLI."""
    graph = _graph()
    reached = _reach("otelguard.core.guard", graph)
    assert "otelguard.core.detectors.turn" in reached
    assert sorted(m for m in reached if not _in_core(m)) == []
    edge_users = {module for library in EDGE_LIBRARIES for module in _importers_of(library, everywhere=True)}
    assert sorted(edge_users & (reached | {"otelguard.core.guard"})) == []


def test_each_coding_agent_cli_is_one_module_beside_what_they_share() -> None:
    """``otelguard.coding_agents`` holds one module per CLI beside what they share: no CLI's module
    imports another CLI's, and the shared modules (the hook command, the mapping's base, the
    settings machinery, large payloads, the notice) import none of them."""
    graph = _graph()
    shared = [m for m in graph if m.startswith("otelguard.coding_agents") and m not in CLI_MAPPINGS]
    assert "otelguard.coding_agents.hook" in shared and "otelguard.coding_agents.mapping" in shared
    for module in [*shared, *CLI_MAPPINGS]:
        others = sorted(m for m in _reach(module, graph) if m in CLI_MAPPINGS and m != module)
        assert others == [], module
