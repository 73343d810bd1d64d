"""One place per job (docs/architecture.md, "One place per job"): the ways the docs call the only ones are.

- the Recorder is built in chalicelib/wiring.py (the composition root) and handed to who records: a stage that
  built its own could hold another counter writer than the container's;
- a ledger outcome is written by the recorder only (stores/ holds the ledger and its ports): a stage holding
  the ledger's write port could write a state and forget its counter;
- a message goes onto an SQS queue from chalicelib/queueing only (the webhooks' own queue from its one adapter);
- "is this the free queue" is answered by chalicelib.core.routing.is_free_queue only;
- no constructor in chalicelib takes more than seven parameters: a wider one is a second composition root.

Each reads chalicelib's source (the AST), as tests/unit/test_layers.py does.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2] / "chalicelib"

# The send path's files, reshaped by issue 40's decide-then-do work, now hold to all of the above too (the
# send path's collaborators are built in wiring.send_path); the set stays for a file a rework leaves pending.
SEND_PATH_PENDING: set[str] = set()

MAX_CONSTRUCTOR_PARAMETERS = 7


def _modules() -> list[tuple[str, ast.Module]]:
    return [(p.relative_to(ROOT).as_posix(), ast.parse(p.read_text())) for p in sorted(ROOT.rglob("*.py"))]


LEDGER_PORTS = "chalicelib.stores.ports.ledger"


def _ledger_write_ports() -> set[str]:
    """LedgerRecords, and any port of chalicelib.stores.ports that joins it, in any of its modules (read from the
    source, so that a join added later is held to the rule too)."""
    trees = [tree for path, tree in _modules() if path.startswith("stores/ports/")]
    ports = [n for tree in trees for n in tree.body if isinstance(n, ast.ClassDef)]
    found = {"LedgerRecords"}
    while True:
        more = {c.name for c in ports if any(isinstance(b, ast.Name) and b.id in found for b in c.bases)} - found
        if not more:
            return found
        found |= more


def _called_name(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _calls(tree: ast.Module, name: str) -> list[int]:
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and _called_name(n) == name]


def test_only_the_composition_root_builds_a_recorder():
    built = [
        f"{path}:{line}"
        for path, tree in _modules()
        if path not in {"wiring.py", "stores/recorder.py"} | SEND_PATH_PENDING
        for line in _calls(tree, "Recorder")
    ]
    assert built == []


def test_the_recorder_builds_its_gathering_twin_only_from_itself():
    """The one other construction: Recorder.gathering(), the same ledger with its counts gathered."""
    tree = dict(_modules())["stores/recorder.py"]
    assert len(_calls(tree, "Recorder")) == 1


def test_only_stores_and_the_recorder_hold_the_ledgers_write_port():
    write_ports = _ledger_write_ports()
    holders = []
    for path, tree in _modules():
        if path.startswith("stores/") or path == "wiring.py" or path in SEND_PATH_PENDING:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("chalicelib.stores.ports"):
                holders += [f"{path}:{node.lineno} {a.name}" for a in node.names if a.name in write_ports]
            # the ledger's port module whole, which holds the write port
            if isinstance(node, ast.ImportFrom) and node.module == "chalicelib.stores.ports":
                holders += [f"{path}:{node.lineno} {a.name}" for a in node.names if a.name == "ledger"]
            if isinstance(node, ast.Import):
                holders += [f"{path}:{node.lineno} {a.name}" for a in node.names if a.name == LEDGER_PORTS]
            if isinstance(node, ast.ImportFrom) and node.module == "chalicelib.stores.ledger":
                holders += [f"{path}:{node.lineno} {a.name}" for a in node.names if a.name == "Ledger"]
    assert holders == []


def test_no_stage_calls_a_ledger_transition():
    """The LedgerRecords methods, read from the port, are called by the recorder only."""
    ports = dict(_modules())["stores/ports/ledger.py"]
    port = next(n for n in ports.body if isinstance(n, ast.ClassDef) and n.name == "LedgerRecords")
    # `finish` is a common word (a drain's, a job's): a ledger's is its claim's, which the other checks cover.
    # `with_outcome` is the port's one read (a batch of Send events reads ahead through the recorder).
    transitions = {f.name for f in port.body if isinstance(f, ast.FunctionDef)} - {"finish", "with_outcome"}
    assert "record_queued" in transitions
    calls = [
        f"{path}:{line} {name}"
        for path, tree in _modules()
        if not path.startswith("stores/") and path not in SEND_PATH_PENDING
        for name in sorted(transitions)
        for line in _calls(tree, name)
    ]
    assert calls == []


def test_only_queueing_sends_onto_a_queue():
    # The webhooks' deliveries have a queue of their own, with its one adapter (not email, not EmailQueue's).
    allowed = {"webhooks/delivery_queue.py"}
    sends = [
        f"{path}:{line} {name}"
        for path, tree in _modules()
        if not path.startswith("queueing/") and path not in allowed
        for name in ("send_message", "send_message_batch")
        for line in _calls(tree, name)
    ]
    assert sends == []


def _is_free_queue_name(node: ast.AST) -> bool:
    """`<anything>.free_queue.name`"""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "name"
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "free_queue"
    )


def test_one_function_answers_is_this_the_free_queue():
    compared = [
        f"{path}:{node.lineno}"
        for path, tree in _modules()
        if path != "core/routing.py" and path not in SEND_PATH_PENDING
        for node in ast.walk(tree)
        if isinstance(node, ast.Compare) and any(map(_is_free_queue_name, [node.left, *node.comparators]))
    ]
    assert compared == []
    routing = dict(_modules())["core/routing.py"]
    in_routing = [n for n in ast.walk(routing) if isinstance(n, ast.Compare)]
    assert sum(any(map(_is_free_queue_name, [c.left, *c.comparators])) for c in in_routing) == 1


def _constructors(tree: ast.Module) -> list[tuple[str, int]]:
    out = []
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef):
            for f in cls.body:
                if isinstance(f, ast.FunctionDef) and f.name == "__init__":
                    a = f.args
                    n = len(a.posonlyargs) + len(a.args) - 1 + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
                    out.append((cls.name, n))
    return out


def test_no_constructor_takes_more_than_seven_parameters():
    wide = {
        f"{path} {name}({n})"
        for path, tree in _modules()
        if path not in SEND_PATH_PENDING
        for name, n in _constructors(tree)
        if n > MAX_CONSTRUCTOR_PARAMETERS
    }
    assert wide == set()
