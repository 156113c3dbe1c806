"""The house's floors, checked on the package's syntax trees (every ``import`` statement,
those inside functions included; those under ``if TYPE_CHECKING:`` are annotations, not
imports, and are left out):

- ``roleagent/algos`` imports only ``roleagent.algos`` (and the standard library, numpy,
  torch): the estimators are pure functions over arrays;
- ``roleagent/envs`` imports nothing from ``roleagent.trainer``, ``roleagent.methods`` or the
  configuration (``roleagent.config``, ``roleagent.config_rules``);
- the trainer (``roleagent/trainer``), the rollout (``roleagent/rollout*.py``) and the data
  model (``roleagent/types.py``) name no method (``role_agent``, ``seal``, ``agent_r``,
  ``asl``, ``wia``, ``aiw``) in their code (names, imports and string literals; docstrings
  and comments may), except the uses in :data:`METHOD_NAMES_ALLOWED`, each with its reason;
- the module graph has no import cycle but through an import listed in
  :data:`CYCLE_EDGES_ALLOWED`, each with its reason (the debt that remains: every entry is
  an import that points up a floor).

An allow-list entry that no longer matches anything fails the test too, so the lists only
shrink as the seams are mended.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import roleagent

PKG = Path(roleagent.__file__).resolve().parent
METHOD_NAME = re.compile(r"(?<![a-z0-9])(role_agent|seal|agent_r|asl|wia|aiw)(?![a-z0-9])")

#: (module, method name) → why that module may name the method in its code.
METHOD_NAMES_ALLOWED: dict[tuple[str, str], str] = {
    ("roleagent.trainer.methods", "wia"): "METHODS: the built-in registry's names and import strings",
    ("roleagent.trainer.methods", "aiw"): "METHODS: the built-in registry's names and import strings",
    ("roleagent.trainer.methods", "seal"): "METHODS: the built-in registry's names and import strings",
    ("roleagent.trainer.methods", "agent_r"): "METHODS: the built-in registry's names and import strings",
    ("roleagent.trainer.methods", "asl"): "METHODS: the built-in registry's names and import strings",
    ("roleagent.trainer.methods", "role_agent"): "METHODS: import strings into roleagent.methods.role_agent",
    ("roleagent.trainer.advantages", "role_agent"): "ESTIMATORS: the role_agent estimator's name and import string",
    ("roleagent.trainer.advantages", "wia"): "ESTIMATORS: the import string roleagent.methods.role_agent.wia",
}

#: (importer, imported) → why this import may close a cycle. Each points up a floor; the
#: rest of the graph is acyclic.
CYCLE_EDGES_ALLOWED: dict[tuple[str, str], str] = {
    ("roleagent.trainer", "roleagent.trainer.loop"): "Trainer imported on first use (module __getattr__)",
    ("roleagent.trainer.checkpoint", "roleagent.trainer.fsdp"): "a sharded policy is gathered through fsdp, "
    "which builds on distributed's DataParallel, whose Trainer subclass imports checkpoint",
    ("roleagent.trainer.distributed", "roleagent.trainer.fsdp"): "optim.fsdp switches the FSDP2 data "
    "parallel on; fsdp subclasses distributed's DataParallel",
    ("roleagent.envs.workers", "roleagent.envs.ray_pool"): "make_pool picks the Ray pool, which builds on "
    "the workers' pool, on demand",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_nodes(tree: ast.AST, on_first_use: bool = True):
    """Every node of ``tree`` but those under ``if TYPE_CHECKING:`` (and, unless
    ``on_first_use``, those of a module-level ``__getattr__``: re-exports loaded on first use)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                stack.extend(child.orelse)
            elif on_first_use or not (node is tree and getattr(child, "name", "") == "__getattr__"):
                stack.append(child)


def imported_names(module: str, on_first_use: bool = True) -> set[str]:
    """The modules ``module`` imports at run time: ``import a.b`` → ``a.b``; ``from a
    import b`` → ``a.b`` when that is a module of the package, else ``a``; relative imports
    resolved."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text(), str(path)), on_first_use):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                out.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return out


def graph(on_first_use: bool = True) -> dict[str, set[str]]:
    """Package module → the package modules its import runs: the module itself and the
    packages above it (their ``__init__`` runs first), but not the packages above the
    importer (already running). Without ``on_first_use``, the imports of a module-level
    ``__getattr__`` (names re-exported on first use) are left out."""
    edges: dict[str, set[str]] = {}
    for module in MODULES:
        own = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 2)}
        targets = set()
        for name in imported_names(module, on_first_use):
            parts = name.split(".")
            for i in range(1, len(parts) + 1):
                target = ".".join(parts[:i])
                if target in MODULES and target not in own:
                    targets.add(target)
        edges[module] = targets
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(edges)))
    try:
        for v in sorted(edges):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found)


def _external(module: str) -> set[str]:
    return {name.split(".")[0] for name in imported_names(module) if not name.startswith("roleagent")}


def test_algos_import_only_algos_and_the_numeric_stack():
    allowed = set(sys.stdlib_module_names) | {"numpy", "torch", "__future__"}
    bad = {}
    for module in (m for m in MODULES if m.startswith("roleagent.algos")):
        inside = {
            n for n in imported_names(module) if n.startswith("roleagent") and not n.startswith("roleagent.algos")
        }
        if wrong := inside | (_external(module) - allowed):
            bad[module] = sorted(wrong)
    assert bad == {}


def test_envs_import_no_trainer_methods_or_config():
    above = ("roleagent.trainer", "roleagent.methods", "roleagent.config", "roleagent.config_rules")
    bad = {}
    for module in (m for m in MODULES if m.startswith("roleagent.envs")):
        wrong = {n for n in imported_names(module) if any(n == a or n.startswith(a + ".") for a in above)}
        if wrong:
            bad[module] = sorted(wrong)
    assert bad == {}


def reached(start: str, edges: dict[str, set[str]]) -> set[str]:
    """The package modules that importing ``start`` can run, function-level imports included."""
    seen, todo = set(), [start]
    while todo:
        for target in edges.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_config_is_a_leaf():
    """The config reaches no trainer and, of the methods, only their settings modules
    (``methods/*/config.py``): the components a config names are checked when a run starts
    (``roleagent.trainer.checks.prepare``), not when it is loaded. The packages' names
    re-exported on first use (``roleagent.methods.Method``) are not loaded by an import."""
    edges = graph(on_first_use=False)
    for start in ("roleagent.config", "roleagent.config_rules"):
        above = {
            m
            for m in reached(start, edges)
            if m.startswith("roleagent.trainer")
            or (m.startswith("roleagent.methods.") and not m.endswith(".config") and m.count(".") > 2)
        }
        assert above == set(), f"{start} reaches {sorted(above)}"


def test_the_leaf_check_can_fail():
    edges = {"roleagent.config": {"roleagent.x"}, "roleagent.x": {"roleagent.trainer.loop"}}
    assert "roleagent.trainer.loop" in reached("roleagent.config", edges)


def _code_words(path: Path) -> set[str]:
    """Lower-cased names, attributes, arguments, imported modules and string literals of the
    file's code, docstrings left out."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                docstrings.add(id(body[0].value))
    words: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words.add(node.value)
        elif isinstance(node, ast.Name):
            words.add(node.id)
        elif isinstance(node, ast.Attribute):
            words.add(node.attr)
        elif isinstance(node, ast.arg | ast.keyword) and node.arg:
            words.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            words.add(node.name)
        elif isinstance(node, ast.alias):
            words.update(filter(None, (node.name, node.asname)))
        elif isinstance(node, ast.ImportFrom) and node.module:
            words.add(node.module)
    return {w.lower() for w in words}


def method_names_used() -> set[tuple[str, str]]:
    """(module, method name) for each method named in the code of the method-blind modules."""
    blind = [
        m
        for m in MODULES
        if m.startswith("roleagent.trainer") or m.startswith("roleagent.rollout") or m == "roleagent.types"
    ]
    return {(m, name) for m in blind for word in _code_words(MODULES[m]) for name in METHOD_NAME.findall(word)}


def test_trainer_rollout_and_types_name_no_method():
    used = method_names_used()
    assert used - set(METHOD_NAMES_ALLOWED) == set(), "a method named outside the allow-list"
    assert set(METHOD_NAMES_ALLOWED) - used == set(), "allow-list entries that no longer match: remove them"


def test_the_method_name_check_can_fail(tmp_path):
    source = 'X = {"algo": 1}\n\ndef f(cfg):\n    """Reads wia."""\n    return cfg.aiw.enabled, "seal/x"\n'
    (tmp_path / "m.py").write_text(source)
    names = {n for w in _code_words(tmp_path / "m.py") for n in METHOD_NAME.findall(w)}
    assert names == {"aiw", "seal"}  # the docstring's "wia" does not count


def test_no_import_cycle_but_through_a_listed_import():
    edges = graph()
    listed = set(CYCLE_EDGES_ALLOWED)
    assert listed - {(a, b) for a, targets in edges.items() for b in targets} == set(), "stale allow-list entries"
    pruned = {a: {b for b in targets if (a, b) not in listed} for a, targets in edges.items()}
    assert cycles(pruned) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
