"""Each infra/local module says which kind it is: the emulator (what AWS does that moto does not) or an
accelerator (what makes moto fast enough), and docs/local-stack.md lists it under that kind.

Read from the source, never imported: the unit layer runs without moto.
"""

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOCAL = ROOT / "infra" / "local"
DOC = ROOT / "docs" / "local-stack.md"
KINDS = {"Emulator": "**Emulator**", "Accelerator": "**Accelerators**"}


def declared_kind(source: str) -> str | None:
    """The kind a module's docstring opens with ("Emulator" or "Accelerator"), or None."""
    doc = ast.get_docstring(ast.parse(source)) or ""
    found = re.match(r"(Emulator|Accelerator): \S", doc)
    return found.group(1) if found else None


def listed_in_doc(text: str, heading: str) -> set[str]:
    """The modules listed (`- `name.py`: ...`) in the paragraph list that follows the bold heading."""
    after = text.split(f"\n{heading}:", 1)[1]
    block = after.split("\n\n", 2)[1]  # the list follows the heading's paragraph
    return set(re.findall(r"^- `(\w+\.py)`", block, re.MULTILINE))


def _modules() -> dict[str, str | None]:
    return {
        p.name: declared_kind(p.read_text(encoding="utf-8"))
        for p in sorted(LOCAL.glob("*.py"))
        if p.name != "__init__.py"
    }


def test_every_local_stack_module_declares_whether_it_emulates_aws_or_accelerates_moto():
    modules = _modules()
    assert len(modules) > 25
    assert {name: kind for name, kind in modules.items() if kind is None} == {}


def test_the_local_stack_page_lists_each_module_under_its_declared_kind():
    text, modules = DOC.read_text(encoding="utf-8"), _modules()
    for kind, heading in KINDS.items():
        assert listed_in_doc(text, heading) == {name for name, k in modules.items() if k == kind}, kind


def test_the_kind_is_read_from_the_docstrings_opening_only():
    assert declared_kind('"""Emulator: SES, as AWS answers."""') == "Emulator"
    assert declared_kind('"""Accelerator: an indexed queue.\n\nmore"""') == "Accelerator"
    assert declared_kind('"""An SES stand-in. Emulator: no."""') is None
    assert declared_kind("x = 1") is None
    assert listed_in_doc("\n**Accelerators**: fast.\n\n- `a.py`: x\n- `b.py`: y\n\nnext", "**Accelerators**") == {
        "a.py",
        "b.py",
    }
