"""The packages of chalicelib import downwards only (docs/architecture.md draws the layers).

core is pure; stores touch DynamoDB and S3 and know core; queueing is the one way onto a queue; the
four pipeline stages (ingest, send, feedback, jobs) know those and never each other; digest is built on
ingest (its email goes through precompile's steps, its events share precompile's topic); control composes
the stages for tenants and operators, and console keeps who is signed in and renders its pages; api is the
HTTP edge over both; wiring builds everything. A stage reaching into a sibling for one name is how the old
flat folder grew tangled, so this test reads every import.
"""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2] / "chalicelib"
LAYER = {
    "core": 0,
    "stores": 1,
    "queueing": 2,
    "ingest": 3,
    "send": 3,
    "feedback": 3,
    "jobs": 3,
    "webhooks": 3,
    "produce": 3,  # moonsend's own producer: uploads read, campaigns published to PrecompileEmail
    "digest": 4,
    "control": 5,  # the tenant's API over campaigns and digests
    "console": 5,  # the console's sessions and its pages' rendering
    "api": 6,  # the HTTP edge: routes by resource, the caller found, answers shaped
}


def _imports(path: pathlib.Path) -> list[tuple[str, int]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("chalicelib."):
            out.append((node.module.split(".")[1], node.lineno))
        elif isinstance(node, ast.Import):
            out += [(a.name.split(".")[1], node.lineno) for a in node.names if a.name.startswith("chalicelib.")]
    return out


def test_every_package_imports_only_its_own_and_lower_layers():
    wrong = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        if len(parts) == 1:
            continue  # wiring.py builds everything
        me = parts[0]
        for target, line in _imports(path):
            if target == me:
                continue
            if target not in LAYER or LAYER[target] >= LAYER[me]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports chalicelib.{target}")
    assert wrong == []


def test_every_package_is_placed_in_a_layer():
    packages = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages == set(LAYER)


def _module_name(path: pathlib.Path) -> str:
    parts = ("chalicelib", *path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_graph() -> dict[str, set[str]]:
    """Each chalicelib module and the chalicelib modules it imports, those under TYPE_CHECKING included (a
    type-only import is still a dependency: the port that names a store's type depends on that store)."""
    paths = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([node.module] if node.module else [])])
                targets |= {t for t in (base, *(f"{base}.{a.name}" for a in node.names)) if t in paths}
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name in paths}
        graph[name] = targets - {name}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
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
                    found.append(sorted(component))
    return found


def test_no_module_is_in_an_import_circle_type_only_imports_included():
    assert _circles(_module_graph()) == []


def test_the_circle_finder_finds_a_circle_through_a_type_only_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


# What implements a store: a port, and what it speaks of, never imports these.
STORE_MACHINERY = ("pynamodb", "boto3", "botocore")


def _third_party(module: str) -> set[str]:
    path = ROOT.parent / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = ROOT.parent / module.replace(".", "/") / "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
    return out


def test_the_stores_ports_depend_on_no_store_only_on_what_they_define():
    """Ports define what they speak of (chalicelib/stores/ports/__init__.py): a store depends on its port, never
    the other way. A port module imports chalicelib.core, the pure chalicelib.stores.pauses and other ports;
    nothing it reaches, however indirectly, imports pynamodb, boto3 or botocore."""
    graph = _module_graph()
    ports = {m for m in graph if m.startswith("chalicelib.stores.ports")}
    allowed = ("chalicelib.core.", "chalicelib.stores.ports", "chalicelib.stores.pauses")
    wrong = sorted(f"{p} imports {t}" for p in ports for t in graph[p] if not t.startswith(allowed))
    reached, todo = set(ports), list(ports)
    while todo:
        for target in graph[todo.pop()] - reached:
            reached.add(target)
            todo.append(target)
    wrong += sorted(f"{m} imports {lib}" for m in reached for lib in _third_party(m) & set(STORE_MACHINERY))
    assert len(ports) > 5 and wrong == []


def test_every_protocol_in_chalicelib_has_a_consumer_in_chalicelib():
    """A port no domain code names (one only tests joined, as the ledger's three joins were) is a second
    description of a store to keep in step for nothing: tests that hand one fake to several collaborators
    join their ports themselves (tests/fakes/parts.py)."""
    defined: dict[str, str] = {}
    named: dict[str, int] = {}
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(b, ast.Name) and b.id == "Protocol" for b in node.bases
            ):
                defined[node.name] = str(path.relative_to(ROOT))
            if isinstance(node, ast.Name):
                named[node.id] = named.get(node.id, 0) + 1
            elif isinstance(node, ast.alias):
                named[node.name] = named.get(node.name, 0) + 1
    unused = sorted(f"{where}: {name}" for name, where in defined.items() if named.get(name, 0) == 0)
    assert len(defined) > 30 and unused == []
