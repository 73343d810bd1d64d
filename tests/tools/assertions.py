"""The suite's assertions, counted in the source, against a floor that only rises.

Moving, merging or speeding up tests must not quietly prove less: `make check` and `make test` fail when
the count falls below the floor in `tests/tools/assertion-floor.txt`. Counted: `assert` statements,
`pytest.raises` and `pytest.fail` calls, and mocks' `assert_*` calls. Raise the floor when the count rises
(`python -m tests.tools.assertions --raise-floor`)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
FLOOR = Path(__file__).with_name("assertion-floor.txt")


def _counts(node: ast.AST) -> bool:
    if isinstance(node, ast.Assert):
        return True
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return name in ("raises", "fail") or name.startswith("assert_")


def count(root: Path = TESTS) -> int:
    return sum(
        sum(map(_counts, ast.walk(ast.parse(path.read_text(encoding="utf-8")))))
        for path in sorted(root.rglob("*.py"))
        if "tools" not in path.relative_to(root).parts
    )


def main(argv: list[str]) -> int:
    found, floor = count(), int(FLOOR.read_text().split()[0])
    if "--raise-floor" in argv and found > floor:
        FLOOR.write_text(f"{found}\n")
        print(f"assertions: {found} (floor raised from {floor})")
        return 0
    if found < floor:
        print(f"assertions: {found}, below the floor of {floor}: a change removed tests' checks", file=sys.stderr)
        return 1
    print(f"assertions: {found} (floor {floor})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
