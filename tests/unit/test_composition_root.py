"""One composition root (chalicelib/wiring.py's Container), and each Lambda function builds only its own part of it.

docs/architecture.md says why the root is one and not one per function: each part is a cached property, built
the first time a handler asks for it, so a function's container holds what its handler reaches and nothing
else, while a collaborator several functions share (the ledger, the recorder, the tenant registry) is built
in one place. These tests hold the first half: a function that reached a part it has no use for (the send
path building the console's sessions) would show here, before it showed as a cold start.
"""

from __future__ import annotations

import functools

import pytest

from chalicelib.core.config import Settings
from chalicelib.wiring import Container

# Building makes boto3 clients (no request) and reads the link key from the settings, never from AWS.
ENV = {
    "MOONSEND_STAGE": "test",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "MOONSEND_LINK_SECRET": "s" * 32,
}
PARTS = {name for name, v in vars(Container).items() if isinstance(v, functools.cached_property)}

# Parts of the tenant API and the console: no pipeline function has a use for them.
EDGE_ONLY = {
    "tenant_api",
    "campaign_reads",
    "suppression_api",
    "event_reads",
    "tenant_view",
    "webhook_registration",
    "sessions",
    "people",
    "sign_in_links",
    "sign_in_guard",
    "console_mailer",
    "uploads",
    "recipient_export",
}


def _built(*entries: str) -> set[str]:
    c = Container(Settings.from_env(ENV))
    for entry in entries:
        getattr(c, entry)
    return {name for name in vars(c) if name in PARTS}


@pytest.fixture(autouse=True)
def _no_real_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)


@pytest.mark.parametrize(
    ("function", "entry"),
    [
        ("send_emails", "drain_chain"),
        ("precompile_email", "precompile_topic"),
        ("ses_events", "ses_events"),
        ("sweeper", "sweeper"),
        ("releaser", "releaser"),
        ("ledger_stream", "ledger_stream"),
    ],
)
def test_a_pipeline_function_builds_its_own_part_and_none_of_the_edges(function, entry):
    built = _built(entry)
    assert entry in built
    assert built & EDGE_ONLY == set(), f"{function} built {sorted(built & EDGE_ONLY)}"
    assert len(built) < len(PARTS) / 2  # far from the whole container


def test_the_names_this_test_speaks_of_are_the_containers():
    assert EDGE_ONLY <= PARTS
