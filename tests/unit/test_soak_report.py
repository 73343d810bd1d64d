"""The soak's merged report: one stack without a report fails the soak without hiding the others'."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture(scope="module")
def soak() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "bench" / "soak.py"
    spec = importlib.util.spec_from_file_location("soak_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _passed_stack() -> dict:
    return {
        "seed": 9,
        "shard": "2 of 2",
        "tenants": 20,
        "recipients": 46978,
        "drained": True,
        "wall_s": 1500,
        "cpu_s": 1400,
        "final_states": {"sent": 46000, "rejected": 978},
        "emails_in_outbox": 46000,
        "unique_sent_recipients": 46000,
        "failures": [],
        "passed": True,
    }


def test_a_stack_that_ended_without_a_report_fails_the_soak_and_the_other_stacks_figures_stay(soak):
    missing = {"seed": 9, "shard": "1 of 2", "failures": ["ended without a report (exit 1)"]}
    merged = soak.merge([missing, _passed_stack()])
    assert merged["passed"] is False
    assert merged["drained"] is False
    assert merged["failures"] == ["stack 1 of 2: ended without a report (exit 1)"]
    assert merged["final_states"] == {"rejected": 978, "sent": 46000}
    assert merged["emails_in_outbox"] == 46000
    assert "FAILED" in soak.markdown(merged)


def test_stacks_that_all_passed_make_a_passed_soak(soak):
    other = _passed_stack() | {"shard": "1 of 2"}
    merged = soak.merge([other, _passed_stack()])
    assert merged["passed"] is True
    assert merged["emails_in_outbox"] == 92000
    assert "**passed**" in soak.markdown(merged)
