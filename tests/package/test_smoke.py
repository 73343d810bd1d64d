"""`moonsend smoke` proves the event path: it fails when SES's events never reach the ledger, though every
email of its campaign is sent (the drainer records `sent` itself; the smoke once waited for that only)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from infra import cli, smoke

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.e2e


def _clients(stack) -> dict:
    names = ("cloudformation", "s3", "sqs", "cloudwatch", "dynamodb", "sns", "sts", "sesv2")
    return {n: stack.client(n) for n in names}


def test_the_smoke_fails_when_ses_events_never_reach_the_ledger():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOONSEND_"))}
    run = subprocess.run(
        [sys.executable, "-m", "tests.package.smoke_probe", "8"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    assert "sent; no feedback yet" in run.stdout  # sent by the drainer, and nothing more heard
    assert "SES's events did not all reach the ledger" in run.stderr


def test_a_healthy_stage_passes_the_smoke_with_its_events_and_the_alarms_drain(stack, capsys):
    clients = _clients(stack)
    sender = "smoke-healthy@moonsend.example"
    clients["sesv2"].create_email_identity(EmailIdentity=sender)
    assert cli._smoke(clients, "local", sender, timeout=60) == 0
    out = capsys.readouterr().out
    assert out.count("sent; delivered") == 2  # the success address, and the email the alarm drained
    assert "sent; bounced; suppressed for every tenant: bounce" in out
    assert "sent; complained; suppressed for this tenant: complaint" in out
    assert "the alarm fired" in out


def test_each_address_of_the_smoke_has_what_only_ses_events_record():
    checks = smoke.wanted("smoke-1")
    success, bounce, complaint = smoke.simulator_addresses("smoke-1")
    assert not checks[success](smoke.Seen("sent", None, None))  # sent alone is not enough
    assert checks[success](smoke.Seen("sent", "delivered", None))
    assert not checks[bounce](smoke.Seen("sent", "bounced", None))  # and a bounce must be suppressed
    assert checks[bounce](smoke.Seen("sent", "bounced", "suppressed for every tenant: bounce (x)"))
    assert checks[complaint](smoke.Seen("sent", "complained", "suppressed for this tenant: complaint (x)"))
