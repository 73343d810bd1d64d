"""`moonsend up` keeps its state across a restart, as a user runs it: stopped mid-campaign with SIGTERM,
started again, the campaign completes with every recipient sent once (and publishing it again sends none)."""

import json
import os
import signal
import subprocess
import sys
import time

import boto3
import pytest

from infra.local.platform import PLATFORM_ACCESS_KEY, PLATFORM_SECRET_KEY
from tests.conftest import read_sends
from tests.e2e.test_cli import _free_port

pytestmark = pytest.mark.e2e

USER, CAMPAIGN, FROM = "restart-tenant", "restart", "news@restart.example"
RECIPIENTS = [f"r{i:02d}@example.org" for i in range(60)]


def _up(port, outbox, *extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOONSEND_"))}
    args = [
        "up",
        "--port",
        str(port),
        "--outbox",
        str(outbox),
        "--api-port",
        "0",
        "--ops-port",
        "0",
        "--free-rate",
        "4",
        *extra,
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "infra", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    lines = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        if "Ctrl-C stops" in line or proc.poll() is not None:
            break
    if "Ctrl-C stops" not in "".join(lines):
        proc.kill()
        pytest.fail("moonsend up never said ready:\n" + "".join(lines))
    return proc, "".join(lines)


def _stop(proc):
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    return out


def _client(service, port):
    return boto3.client(
        service,
        endpoint_url=f"http://127.0.0.1:{port}",
        region_name="us-east-1",
        aws_access_key_id=PLATFORM_ACCESS_KEY,
        aws_secret_access_key=PLATFORM_SECRET_KEY,
    )


def _publish(port):
    topic = "arn:aws:sns:us-east-1:123456789012:moonsend-local-PrecompileEmail"
    sender = {"region": "us-east-1", "ratePerSecond": "4", "emailAddress": FROM, "fromName": "Restart"}
    for i in range(0, len(RECIPIENTS), 10):
        message = {
            "userId": USER,
            "sender": sender,
            "campaign": {"id": CAMPAIGN, "subject": "Hi", "body": "<p>Hi</p>"},
            "recipients": [{"email": e} for e in RECIPIENTS[i : i + 10]],
        }
        _client("sns", port).publish(TopicArn=topic, Message=json.dumps(message))


def _sent(outbox):
    return sorted(s["to"] for s in read_sends(outbox) if s["userId"] == USER)


def _wait_for_sends(outbox, n, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(_sent(outbox)) < n:
        time.sleep(0.2)
    return _sent(outbox)


def test_a_stack_stopped_mid_campaign_finishes_it_after_a_restart_sending_each_recipient_once(tmp_path):
    outbox = tmp_path / "outbox"
    port = _free_port()
    proc, banner = _up(port, outbox)
    assert f"state: {(outbox / '.state' / 'stack.pickle').resolve()}: started empty" in banner
    _client("sesv2", port).create_email_identity(EmailIdentity=FROM)  # the platform account's identity
    _publish(port)
    assert len(_wait_for_sends(outbox, 6, 60)) >= 6
    # Mid-campaign: the free plan sends 4 a second, 60 take 15 s. The drain finishes the emails it holds
    # (up to 20) before it stops, as it does at its Lambda deadline; the rest stay queued and are saved.
    out = _stop(proc)
    before = _sent(outbox)
    assert len(before) < len(RECIPIENTS), "the campaign finished before the stop: nothing was tested"
    saved = next(line for line in out.splitlines() if line.startswith("stopped; state saved"))
    assert f"holding {len(RECIPIENTS) - len(before)} messages" in saved

    proc, banner = _up(port, outbox)
    assert "loaded (saved" in banner
    # Used up once loaded: a run that then dies without a clean stop never brings back the data of before it.
    state = outbox / ".state"
    assert not (state / "stack.pickle").exists() and (state / "stack.loaded").exists()
    after = _wait_for_sends(outbox, len(RECIPIENTS), 90)
    assert after == RECIPIENTS  # every recipient, each once (sorted, so a duplicate would show twice)
    _publish(port)  # the finding: publishing the campaign again after a restart sent 35 emails twice
    time.sleep(4)
    assert _sent(outbox) == RECIPIENTS
    command = ["recipients", "--endpoint", f"http://127.0.0.1:{port}", "--user", USER, "--campaign", CAMPAIGN]
    recipients = subprocess.run(
        [sys.executable, "-m", "infra", *command],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOONSEND_"))},
    )
    states = [line.split("\t")[1] for line in recipients.stdout.splitlines() if "\t" in line]
    assert states == ["sent"] * len(RECIPIENTS), recipients.stdout + recipients.stderr
    _stop(proc)

    proc, banner = _up(port, outbox, "--fresh")
    assert "started empty" in banner
    proc.kill()
    proc.wait()
