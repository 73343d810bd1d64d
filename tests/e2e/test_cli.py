"""The moonsend command, run as a user runs it: `up` in one process, `send` and `status` in others."""

import http.client
import http.cookiejar
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _moonsend(*args: str, **kw) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOONSEND_"))}
    return subprocess.run(
        [sys.executable, "-m", "infra", *args], capture_output=True, text=True, timeout=120, env=env, **kw
    )


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    """One `moonsend up` the module's tests share (none of them stops it: the SIGTERM test has its own)."""
    started = _up(tmp_path_factory)
    yield started
    if started[2].poll() is None:
        started[2].kill()


def _up(tmp_path_factory):
    port = _free_port()
    outbox = tmp_path_factory.mktemp("cli-outbox")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOONSEND_"))}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "infra",
            "up",
            "--port",
            str(port),
            "--outbox",
            str(outbox),
            "--ses-account",
            "AKIACLITENANT=20/1000",
            "--ses-latency-ms",
            "5",
            "--api-port",
            "0",
            "--ops-port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    lines = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        lines.append(line)
        if "Point any AWS SDK" in line:  # the last line `up` prints once ready
            break
    else:
        proc.kill()
        pytest.fail("moonsend up never said ready:\n" + "".join(lines))
    return port, outbox, proc, lines


def test_up_prints_ready_and_the_topic_arns(running):
    port, _outbox, _proc, lines = running
    out = "".join(lines)
    ready = next(line for line in out.splitlines() if "ready" in line)
    assert f"ready at http://127.0.0.1:{port}" in ready
    assert "arn:aws:sns:us-east-1:123456789012:moonsend-local-PrecompileEmail" in ready
    assert "arn:aws:sns:us-east-1:123456789012:moonsend-local-SendEmails" in ready
    # The operator's page beside the stack, in a process of its own: its link answers, and only with its key.
    link = next(line for line in out.splitlines() if "operator's page:" in line).split()[-1]
    base = link.split("/sign-in", 1)[0]
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(base + "/s/guessed/", timeout=30)
    assert refused.value.code == 401
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    page = opener.open(link, timeout=30).read().decode()
    assert "The stage at a glance" in page and "moonsend-local-free" in page


def test_up_refuses_a_taken_port_with_a_clear_message(running):
    port = running[0]
    result = _moonsend("up", "--port", str(port))
    assert result.returncode == 2
    assert f"port {port} on 127.0.0.1 is taken" in result.stderr


@pytest.fixture(scope="module")
def cli_campaign(running, tmp_path_factory):
    """The campaign `cli-camp` sent with `moonsend send` (2 good recipients, 1 bad) and its 2 emails written:
    what the tests of `status`, `recipients` and `campaign` read, whichever of them runs first."""
    port, outbox, _proc, _lines = running
    tmp_path = tmp_path_factory.mktemp("cli-campaign")
    (tmp_path / "subject.txt").write_text("Hello {{ name }}")
    (tmp_path / "body.html").write_text("<p>Hi {{ name }} from {{ city }}</p>")
    (tmp_path / "people.csv").write_text(
        "email,name,city\nann@example.org,Ann,Oslo\nbob@example.org,Bob,Lima\nnot-an-address,Eve,Rome\n"
    )
    endpoint = f"http://127.0.0.1:{port}"
    sent = _moonsend(
        "send",
        "--endpoint",
        endpoint,
        "--user",
        "cli-tenant",
        "--from",
        "news@cli.example",
        "--subject-file",
        str(tmp_path / "subject.txt"),
        "--body-file",
        str(tmp_path / "body.html"),
        "--recipients",
        str(tmp_path / "people.csv"),
        "--rate",
        "10",
        "--api-key",
        "AKIACLITENANT",
        "--api-secret",
        "s3cret",
        "--verify-sender",
        "--campaign-id",
        "cli-camp",
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(list((outbox / "cli-tenant").rglob("*.eml"))) < 2:
        time.sleep(0.2)
    emails = sorted(p.read_text() for p in (outbox / "cli-tenant" / "cli-camp").glob("*.eml"))
    return endpoint, sent, emails


def test_send_then_status_shows_the_campaign_delivered(cli_campaign):
    endpoint, sent, emails = cli_campaign
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.strip() == "cli-camp"
    assert len(emails) == 2 and any("Hi Ann from Oslo" in e for e in emails)
    # From the state on: state, scheduled, queued, sent, failed, cancelled, expired, rejected. The drainer's
    # counters are flushed once a second (later on a busy machine), so the table is asked for until it is final.
    want, cells, deadline = ["", "0", "2", "2", "0", "0", "0", "1"], [], time.monotonic() + 30
    while cells[3:11] != want and time.monotonic() < deadline:
        status = _moonsend("status", "--endpoint", endpoint, "--user", "cli-tenant")
        assert status.returncode == 0, status.stderr
        row = next(line for line in status.stdout.splitlines() if "cli-camp" in line)
        cells = [c.strip() for c in row.split("│")]
    assert cells[3:11] == want
    assert "moonsend-local-t-cli-tenant" in status.stdout


def test_recipients_lists_each_recipient_with_its_state_and_reason(cli_campaign):
    def recipients(*extra):
        endpoint = cli_campaign[0]
        return _moonsend("recipients", "--endpoint", endpoint, "--user", "cli-tenant", "--campaign", "cli-camp", *extra)

    out = recipients("--csv")
    assert out.returncode == 0, out.stderr
    rows = {line.split(",")[0]: line for line in out.stdout.splitlines()[1:]}
    assert rows["ann@example.org"].split(",")[1] == "sent"
    assert rows["not-an-address"].split(",")[1:3] == ["rejected", "recipients[2].email: not an email address"]
    rejected_only = recipients("--state", "rejected")
    assert rejected_only.stdout.count("\n") == 1 and "not-an-address" in rejected_only.stdout


def test_recipients_pages_and_campaign_commands_answer_with_what_they_did(cli_campaign, tmp_path):
    endpoint = cli_campaign[0]
    who = ("--endpoint", endpoint, "--user", "cli-tenant", "--campaign", "cli-camp")
    page = _moonsend("recipients", *who, "--limit", "2")
    assert page.returncode == 0 and page.stdout.count("\n") == 2 and "more: --after " in page.stderr
    cursor = page.stderr.split("more: --after ", 1)[1].split()[0]
    rest = _moonsend("recipients", *who, "--limit", "2", "--after", cursor)
    assert rest.stdout.count("\n") == 1 and "more:" not in rest.stderr  # 3 recipients in all

    pause = _moonsend("campaign", "pause", *who)
    assert pause.returncode == 0 and "paused" in pause.stdout
    resume = _moonsend("campaign", "resume", *who)
    assert resume.returncode == 0 and "resumed: 0 parked" in resume.stdout
    retry = _moonsend("campaign", "retry-failed", *who)
    assert retry.returncode == 0 and "0 failed recipient(s) queued again" in retry.stdout
    moved = _moonsend("campaign", "schedule", *who, "--at", "2099-01-01T00:00:00Z")
    assert moved.returncode == 1 and "nothing of this campaign is waiting" in moved.stderr
    unknown = _moonsend("campaign", "pause", "--endpoint", endpoint, "--user", "cli-tenant", "--campaign", "nope")
    assert unknown.returncode == 1 and "no campaign 'nope'" in unknown.stderr

    (tmp_path / "body.html").write_text("<p>later</p>")
    (tmp_path / "people.csv").write_text("email\nzed@example.org\n")
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3 * 3600))
    sent = _moonsend(
        "send", "--endpoint", endpoint, "--user", "cli-tenant", "--from", "news@cli.example", "--subject", "Later",
        "--body-file", str(tmp_path / "body.html"), "--recipients", str(tmp_path / "people.csv"),
        "--api-key", "AKIACLITENANT", "--api-secret", "s3cret", "--campaign-id", "cli-later",
        "--at", at, "--expires-after", "PT1H",
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    deadline = time.monotonic() + 20
    row = ""
    while time.monotonic() < deadline and "at 20" not in row:
        status = _moonsend("status", "--endpoint", endpoint, "--user", "cli-tenant")
        row = next((line for line in status.stdout.splitlines() if "cli-later" in line), "")
        time.sleep(0.5)
    assert f"at {at[:10]} {at[11:16]}Z" in row, status.stdout  # waiting for its time, its one recipient scheduled
    later = ("--endpoint", endpoint, "--user", "cli-tenant", "--campaign", "cli-later")
    assert "scheduled" in _moonsend("recipients", *later).stdout
    cancel = _moonsend("campaign", "cancel", *later)
    assert cancel.returncode == 0 and "1 scheduled recipient(s) recorded cancelled" in cancel.stdout
    assert "\tcancelled\t" in _moonsend("recipients", *later).stdout


def test_an_uploaded_csv_is_read_and_sent_from_the_command_line(cli_campaign, running, tmp_path):
    """The README's way to send without code: `upload` prints the report, `campaign send` sends to it."""
    endpoint, outbox = cli_campaign[0], running[1]
    people = tmp_path / "customers.csv"
    people.write_bytes(
        b"\xef\xbb\xbfEmail,name\r\ncy@example.org,Cy\r\nCY@example.org,Again\r\ndee@example.org,Dee\r\nnope,X\r\n"
    )
    uploaded = _moonsend("upload", "--endpoint", endpoint, "--user", "cli-tenant", "--file", str(people))
    assert uploaded.returncode == 0, uploaded.stderr
    assert "4 rows, 2 recipients, 1 duplicates removed, 1 refused, 0 on the suppression list" in uploaded.stdout
    assert "line 5: Email: not an email address" in uploaded.stderr
    upload_id = uploaded.stdout.split()[1].rstrip(":")
    sent = _moonsend(
        "campaign", "send", "--endpoint", endpoint, "--user", "cli-tenant", "--upload", upload_id,
        "--subject", "Hi {{ name }}", "--body", "<p>Dear {{ name }}</p>",
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    campaign = sent.stdout.split('"id": "')[1].split('"')[0]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(list((outbox / "cli-tenant" / campaign).glob("*.eml"))) < 2:
        time.sleep(0.2)
    emails = sorted(p.read_text() for p in (outbox / "cli-tenant" / campaign).glob("*.eml"))
    assert len(emails) == 2 and any("Dear Cy" in e for e in emails) and any("Dear Dee" in e for e in emails)


def test_status_shows_tenant_text_as_it_is_and_obeys_none_of_it(running, tmp_path):
    """A pause reason with Rich markup and terminal escapes: shown literally, the command still succeeds."""
    endpoint = f"http://127.0.0.1:{running[0]}"
    hostile = "[/] [bold]x\x1b[2J\x1b]0;owned\x07\x9b31m"
    (tmp_path / "one.csv").write_text("email\nann@example.org\n")
    (tmp_path / "body.html").write_text("<p>Hi</p>")
    sent = _moonsend(
        "send",
        "--endpoint",
        endpoint,
        "--user",
        "cli-hostile",
        "--from",
        "news@hostile.example",
        "--subject",
        "Hi",
        "--body-file",
        str(tmp_path / "body.html"),
        "--recipients",
        str(tmp_path / "one.csv"),
        "--api-key",
        "AKIACLITENANT",
        "--api-secret",
        "s3cret",
        "--verify-sender",
        "--campaign-id",
        "cli-hostile-c",
    )
    assert sent.returncode == 0, sent.stderr
    deadline = time.monotonic() + 30  # the tenant is registered once its message is precompiled
    while True:
        paused = _moonsend("tenant", "pause", "--endpoint", endpoint, "--user", "cli-hostile", "--reason", hostile)
        if paused.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert paused.returncode == 0, paused.stderr
    try:
        out = _moonsend("status", "--endpoint", endpoint)
        assert out.returncode == 0, out.stderr
        assert "[/] [bold]x" in out.stdout  # as written, not read as markup
        assert "\\x1b[2J" in out.stdout and "\\x07" in out.stdout and "\\x9b" in out.stdout
        assert not any(c in out.stdout for c in "\x1b\x07\x9b")
    finally:
        _moonsend("tenant", "resume", "--endpoint", endpoint, "--user", "cli-hostile")


def _publish_as_producer(port: int, messages: list[dict]) -> None:
    """A tenant's own system publishing to the stage's topic (its credentials, not the operator's process)."""
    import json

    import boto3

    from infra.local.platform import PLATFORM_ACCESS_KEY, PLATFORM_SECRET_KEY

    sns = boto3.client(
        "sns",
        endpoint_url=f"http://127.0.0.1:{port}",
        region_name="us-east-1",
        aws_access_key_id=PLATFORM_ACCESS_KEY,
        aws_secret_access_key=PLATFORM_SECRET_KEY,
    )
    topic = "arn:aws:sns:us-east-1:123456789012:moonsend-local-PrecompileEmail"
    for message in messages:
        sns.publish(TopicArn=topic, Message=json.dumps(message))


def test_digest_run_from_an_operators_shell_mails_links_to_the_stages_own_api(running):
    """`moonsend digest run` composes in the operator's process, which CloudFormation tells nothing: the API's
    URL its links need is read from the stack's outputs (it once failed on every stage, LinksNotConfigured)."""
    port, outbox, _proc, lines = running
    endpoint = f"http://127.0.0.1:{port}"
    api = next(line for line in lines if "app's HTTP routes" in line).rsplit(" ", 1)[1].strip()
    sender = {
        "apiKey": "AKIACLITENANT",
        "apiSecret": "s3cret",
        "ratePerSecond": "10",
        "emailAddress": "news@cli.example",
        "fromName": "CLI digest",
    }
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 600))
    definition = {
        "id": "cli-digest",
        "subject": "{{ items_total }} new",
        "body": "<p>{% for item in items %}{{ item.data.title }} {% endfor %}</p>",
        "schedule": "cron(0 13 ? * WED *)",
        "window": "P7D",
    }
    recipient = {"email": "dee@example.org", "metadata": {"name": "Dee"}}
    item = {"id": "i1", "type": "Note", "at": at, "data": {"title": "First note"}}
    import boto3
    from botocore.exceptions import ClientError

    ses = boto3.client(
        "sesv2", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="AKIACLITENANT",
        aws_secret_access_key="s3cret",
    )  # fmt: skip
    try:  # the From, verified in the tenant's own SES account (other tests of the module may have done it)
        ses.create_email_identity(EmailIdentity="news@cli.example")
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "AlreadyExistsException", exc
    who = ("--endpoint", endpoint, "--user", "cli-digest-t", "--digest", "cli-digest")

    def until(said: str) -> None:
        deadline, status = time.monotonic() + 30, None
        while time.monotonic() < deadline:
            status = _moonsend("digest", "status", *who)
            if said in status.stdout:
                return
            time.sleep(0.5)
        assert status is not None and said in status.stdout, status.stdout + status.stderr

    _publish_as_producer(port, [{"userId": "cli-digest-t", "sender": sender, "digest": definition}])
    until(": ready")
    _publish_as_producer(
        port, [{"userId": "cli-digest-t", "digest": {"id": "cli-digest"}, "recipient": recipient, "item": item}]
    )
    until("recipients pending: 1 of 1")
    ran = _moonsend("digest", "run", *who)
    assert ran.returncode == 0, ran.stderr
    assert "emails: 1" in ran.stdout
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not list((outbox / "cli-digest-t").rglob("*.eml")):
        time.sleep(0.2)
    (mail,) = (outbox / "cli-digest-t").rglob("*.eml")
    unsubscribe = next(line for line in mail.read_text().splitlines() if line.startswith("List-Unsubscribe:"))
    assert f"<{api}/unsubscribe/" in unsubscribe


def test_sigterm_stops_the_stack_cleanly(tmp_path_factory):
    _port, outbox, proc, _lines = _up(tmp_path_factory)
    assert (outbox / ".state" / "running").exists()  # marked while it runs
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert "stopped" in out
    assert not (outbox / ".state" / "running").exists()  # saved: the next start loads it, and says nothing


def test_a_stack_killed_without_its_stop_is_named_at_the_next_start_which_starts_empty_only_when_told(
    tmp_path_factory,
):
    # SIGKILL (or the machine going down) saves nothing: the ledger of what that run sent is gone while its
    # emails are in the outbox. Starting empty as if nothing happened would let the user publish again and
    # mail those recipients twice.
    _port, outbox, proc, _lines = _up(tmp_path_factory)
    proc.kill()
    proc.wait(timeout=30)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOONSEND_"))}
    again = subprocess.run(
        [sys.executable, "-m", "infra", "up", "--port", str(_free_port()), "--outbox", str(outbox), "--ops-port", "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert again.returncode == 2
    assert "ended without a clean stop" in again.stderr and "--fresh" in again.stderr
    assert f"pid {proc.pid}" in again.stderr


def test_the_mark_of_a_live_stack_on_the_same_outbox_is_told_apart_from_a_dead_ones(tmp_path):
    from infra.local.state import mark_running, previous_run, unmark_running

    assert previous_run(tmp_path) is None
    mark_running(tmp_path)  # this process: alive, but it is the caller's own mark
    mine = previous_run(tmp_path)
    assert mine is not None and mine.alive is False
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (tmp_path / ".state" / "running").write_text(f"{child.pid} {time.time()}")
        other = previous_run(tmp_path)
        assert other is not None and other.alive and "is running on" in other.explain(tmp_path)
    finally:
        child.kill()
        child.wait()
    dead = previous_run(tmp_path)
    assert dead is not None and not dead.alive and "ended without a clean stop" in dead.explain(tmp_path)
    unmark_running(tmp_path)
    assert previous_run(tmp_path) is None


def test_readme_quick_start_is_the_two_make_commands():
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "make demo" in quick and "make test" in quick


def test_recipient_text_is_printed_with_its_control_characters_escaped():
    from infra.terminal import plain

    assert plain("ann@example.org\x1b[31m\r\n\x00\x7f") == "ann@example.org\\x1b[31m\\x0d\\x0a\\x00\\x7f"
    assert plain("tab\tkept") == "tab\tkept"


def test_bidi_overrides_and_backslashes_cannot_disguise_what_the_operator_reads():
    from infra.terminal import plain

    # "Trojan Source": a right-to-left override would show `gro.elpmaxe@nna` reordered as something else.
    assert plain("ann\u202egro.elpmaxe\u2066@x") == "ann\\u202egro.elpmaxe\\u2066@x"
    # Text typed as `\x1b` reads differently from an escaped ESC.
    assert plain("typed \\x1b") == "typed \\\\x1b" and plain("\x1b") == "\\x1b"


def test_csv_cells_that_a_spreadsheet_would_run_as_formulas_are_kept_as_text():
    from infra.terminal import spreadsheet_safe

    for formula in ('=HYPERLINK("http://evil")', "+1+1", "-2", "@SUM(A1)", "\tx"):
        assert spreadsheet_safe(formula) == "'" + formula
    assert spreadsheet_safe("ann@example.org") == "ann@example.org"


def _kept_demo(outbox: Path) -> tuple[int, str, str]:
    """`moonsend demo --keep`: once it prints the console's address, its admin's link and the key, the console
    is asked as a person would (the link's page, then signing in with it; the key too; the campaigns page),
    then Ctrl-C; its exit code and output."""
    import re
    import urllib.parse

    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOONSEND_"))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "infra", "demo", "--keep", "--outbox", str(outbox), "--ops-port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "PYTHONUNBUFFERED": "1"},
    )
    said: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # the demo's own timeouts bound this
            said.append(line)
            if line.startswith("or with acme's API key"):
                break
        text = "".join(said)
        url = re.search(r"^console: (\S+)", text, re.M)
        link = re.search(r"^sign in as admin@acme\.example \(acme's admin\), once, within 8 hours: (\S+)", text, re.M)
        key = re.search(r"^or with acme's API key: (\S+)", text, re.M)
        assert url and link and key, text[-3000:]
        assert re.search(r"^  operator's page: http://127\.0\.0\.1:\d+/sign-in\?key=\S+$", text, re.M), text[-3000:]
        parsed = urllib.parse.urlsplit(url.group(1))
        conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
        path = urllib.parse.urlsplit(link.group(1)).path
        conn.request("GET", path)
        shown = conn.getresponse()
        assert shown.status == 200 and "admin@acme.example" in shown.read().decode()
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        for sent_to, fields in ((path, {"tenant": "acme"}), ("/console/sign-in", {"key": key.group(1)})):
            conn.request("POST", sent_to, urllib.parse.urlencode(fields), form)
            signed_in = conn.getresponse()
            signed_in.read()
            cookie = signed_in.getheader("Set-Cookie", "").split(";")[0]
            conn.request("GET", "/console", headers={"Cookie": cookie})
            page = conn.getresponse()
            assert (signed_in.status, page.status) == (303, 200), sent_to
            assert "welcome-acme" in page.read().decode()
        conn.close()
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    return proc.returncode, "".join(said) + out, err


def test_a_kept_demo_prints_no_warning_opens_its_console_and_every_email_parses_strictly_within_the_rfcs(
    tmp_path,
):
    """Expected races (SES's Send event before the sender's own record) are DEBUG: a clean run is quiet.
    `--keep` leaves the stack up for the console until Ctrl-C, and ends cleanly then. Each .eml as mail:
    Python's strict parser finds no defect, lines fit RFC 5322, words fit RFC 2047."""
    import re
    from email import message_from_bytes
    from email.policy import strict

    returncode, stdout, stderr = _kept_demo(tmp_path / "outbox")
    assert returncode == 0, stdout[-2000:] + stderr[-2000:]
    noisy = [line for line in (stdout + stderr).splitlines() if "WARNING" in line or "Warning" in line]
    assert noisy == []
    emails = sorted((tmp_path / "outbox").rglob("*.eml"))
    assert len(emails) >= 200
    for path in emails:
        raw = path.read_bytes()
        msg = message_from_bytes(raw, policy=strict)  # raises on any defect
        assert msg["List-Id"] and msg["List-Unsubscribe"] and msg["Subject"] is not None, path
        head = raw.split(b"\r\n\r\n", 1)[0]
        assert max(len(line) for line in raw.split(b"\r\n")) <= 998, path
        assert all(len(w) <= 75 for w in re.findall(rb"=\?[^?\s]+\?[bBqQ]\?[^?\s]*\?=", head)), path
        assert not re.search(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", head), path
