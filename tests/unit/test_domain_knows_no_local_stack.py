"""The domain (chalicelib/, app.py) says what it does in AWS's terms: it never names the local stack.

What differs between the local stack and AWS is a setting (chalicelib.core.config), given by whatever runs
the functions; a behaviour that exists for an emulator's sake names the AWS behaviour it mirrors. A module
that names the local stack, moto or infra.local is one that knows where it runs, which is how
`stage == "local"` branches grew in the domain.
"""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
NAMES_THE_STACK = re.compile(r"local(?:[_-]|\s+(?:#\s*)?)stack|\bmoto\b|infra[./]local", re.IGNORECASE)


def _domain_files() -> list[pathlib.Path]:
    return [ROOT / "app.py", *sorted((ROOT / "chalicelib").rglob("*.py"))]


def mentions(path: pathlib.Path, root: pathlib.Path = ROOT) -> list[tuple[str, int, str]]:
    """Each place the file names the local stack, moto or infra.local (a phrase may wrap onto the next line):
    its file, line and that line's text."""
    name, text = path.relative_to(root).as_posix(), path.read_text(encoding="utf-8")
    lines = text.splitlines()
    at = [text.count("\n", 0, m.start()) for m in NAMES_THE_STACK.finditer(text)]
    return [(name, n + 1, lines[n].strip()) for n in at]


def test_no_domain_module_names_the_local_stack_moto_or_infra_local():
    found = [m for path in _domain_files() for m in mentions(path)]
    assert [f"{name}:{n}: {line}" for name, n, line in found] == []


def test_the_check_sees_each_way_of_naming_the_stack(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Runs on the Local Stack."""\n'
        "import infra.local.stack\n"
        "# moto answers otherwise\n"
        "LOCAL_STACK = 1\n"
        "from infra.local import faults\n"
        "# promoted, remote, a local stage: none of these\n"
        "# what the local\n"
        "# stack does, wrapped\n"
    )
    hits = [n for _name, n, _line in mentions(sample, tmp_path)]
    assert hits == [1, 2, 3, 4, 5, 7]
    assert len(_domain_files()) > 50  # the walk sees the package, not an empty folder
