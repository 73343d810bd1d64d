"""Log lines: one JSON object each, with tenant, campaign and queue, and never a secret."""

import io
import json

import pytest

from chalicelib.core import log


@pytest.fixture
def log_output():
    """What the moonsend logger writes (its handler holds the stream it was created with)."""
    handler = log.logger.registered_handler
    buffer = io.StringIO()
    old = handler.setStream(buffer)

    class Reader:
        def readouterr(self):
            class Out:
                out = buffer.getvalue()

            return Out()

    yield Reader()
    handler.setStream(old)


def test_a_log_line_is_one_json_object_with_tenant_campaign_and_queue(log_output):
    log.set_level("INFO")
    try:
        log.info("sent", user="acme", campaign="spring", queue="moonsend-test-t-acme", message_id="m-1")
    finally:
        log.set_level("WARNING")
    (line,) = [x for x in log_output.readouterr().out.splitlines() if x.strip()]
    record = json.loads(line)
    assert record["message"] == "sent" and record["level"] == "INFO" and record["service"] == "moonsend"
    assert (record["user"], record["campaign"], record["queue"]) == ("acme", "spring", "moonsend-test-t-acme")
    assert record["location"].startswith("test_a_log_line")  # the caller, not the wrapper


def test_fields_named_like_secrets_are_masked_whatever_their_case(log_output):
    log.warning("oops", apiSecret="s3cr3t", API_KEY="AKIA123", sessionToken="tok", user="acme")
    out = log_output.readouterr().out
    record = json.loads(out.strip().splitlines()[-1])
    assert "s3cr3t" not in out and "AKIA123" not in out and 'tok"' not in out
    assert record["apiSecret"] == record["API_KEY"] == record["sessionToken"] == "***"
    assert record["user"] == "acme"


def test_lines_below_the_level_cost_nothing_and_print_nothing(log_output):
    log.info("chatty", user="acme")  # the tests run at WARNING
    assert log_output.readouterr().out == ""
