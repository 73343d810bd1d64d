"""Shared fixtures. One local stack per test session (it sets this process's AWS environment)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # imported where a stack is made: the unit layer's process never loads moto or werkzeug
    from infra.local.stack import LocalStack


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The unit layer first (in whatever order pytest-randomly chose within it): in a run of every layer in
    one process, its tests then run before any local stack patches the process (tests/unit/conftest.py)."""
    unit = Path(__file__).parent / "unit"
    items[:] = sorted(items, key=lambda item: not item.path.is_relative_to(unit))


@pytest.fixture(scope="session", autouse=True)
def quiet_logs() -> Iterator[None]:
    """The handlers' INFO lines (one per email) would fill pytest's captured output: warnings up only."""
    from chalicelib.core import log

    log.set_level("WARNING")
    yield


TEST_DRAINER_MAX_RATE = 15


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    from infra.local.stack import LocalStack, StackConfig

    outbox = tmp_path_factory.mktemp("outbox")
    # The releaser's lead at 2 s (90 s on AWS), so that a campaign scheduled 8 s ahead goes through the
    # schedule store and the tests need not wait minutes. One drainer sends at most 15 a second here, so
    # that every test of a tenant above that (exactly once, faults, events) runs several drainers per queue.
    config = StackConfig(
        port=0,
        api_port=0,
        outbox=outbox,
        ses_latency_ms=5.0,
        extra_env={"MOONSEND_SCHEDULE_LEAD_S": "2", "MOONSEND_DRAINER_MAX_RATE": str(TEST_DRAINER_MAX_RATE)},
    )
    st = LocalStack(config).start()
    try:
        yield st
    finally:
        st.stop()
    # Every test ran on the stack created from the template, each function signing as its own role: a call
    # its policy does not allow would fail on AWS too (deliberate refusals are removed by their tests).
    refused = sorted(set(st.access.denied)) if st.access is not None else []
    if refused:
        pytest.fail(f"calls the functions' IAM policies refused: {refused}")


@pytest.fixture
def uid() -> str:
    """A fresh id, so tests sharing the stack never see each other's tenants or queues."""
    return uuid.uuid4().hex[:10]


def canonical(**overrides: Any) -> dict[str, Any]:
    """MoonMail's canonical PrecompileEmail message, as in seed 003."""
    msg: dict[str, Any] = {
        "userId": "user-1",
        "sender": {
            "region": "us-east-1",
            "apiKey": "AKIAEXAMPLE",
            "apiSecret": "secret/EXAMPLE+key",
            "ratePerSecond": "5",
            "emailAddress": "news@example.com",
            "fromName": "Example News",
        },
        "campaign": {"id": "camp-1", "body": "<p>Hi {{ name }}</p>", "subject": "Hello {{ name }}"},
        "recipient": {"email": "ann@example.org", "metadata": {"name": "Ann", "surname": "Lee"}},
    }
    for key, value in overrides.items():
        msg[key] = value
    return msg


def as_function(stack: LocalStack, handler: str) -> Any:
    """Calls in this block are made as the function's role (as its handler's would be), checked by IAM."""
    from infra.local.identity import acting_as

    assert stack.runner is not None and stack.settings is not None
    return acting_as(stack.runner.functions[stack.settings.resources.function_name(handler)].role)


def container_of(stack: LocalStack, handler: str) -> Any:
    """The container the deployed function `handler` runs with: each function builds its own from its own
    environment (infra.local.environment), so a test that changes what a function does changes this one."""
    from chalicelib import wiring
    from infra.local.environment import acting_in

    assert stack.settings is not None
    with acting_in(stack.environments[stack.settings.resources.function_name(handler)]):
        return wiring.container()


def read_sends(outbox: Path) -> list[dict[str, Any]]:
    path = outbox / "sends.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def eventually(predicate: Callable[[], Any], timeout: float = 60.0, poll_s: float = 0.2) -> bool:
    """Whether `predicate` holds within `timeout` seconds, asked every `poll_s`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll_s)
    return False


def free_tenant(stack: LocalStack, user: str) -> dict[str, Any]:
    """A free-plan tenant registered, sending from an address verified in the platform's SES account: its
    `sender` block."""
    from chalicelib import wiring
    from chalicelib.core.message_parser import parse_sender

    c = wiring.container()
    sender = {"region": "us-east-1", "ratePerSecond": "10", "emailAddress": f"news@{user}.example", "fromName": "N"}
    stack.client("sesv2").create_email_identity(EmailIdentity=sender["emailAddress"])
    c.tenants.accept(user, "free", parse_sender({"sender": sender}, []), c.ses.account_of)
    return sender
