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
