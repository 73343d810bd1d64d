"""Every exchange an e2e test has with the API is checked against the OpenAPI document
(chalicelib/control/openapi.json) by openapi-core, a validator nobody here wrote: the response's status,
content type, headers and body must be among those the document gives the route; a request the document
forbids must be answered 4xx. A test whose exchanges break the document fails, naming the route and what
is wrong. The local stack records the exchanges (infra/local/api_exchanges.py) while a test runs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.e2e.openapi_check import violations

if TYPE_CHECKING:
    from infra.local.stack import LocalStack

_STACK = pytest.StashKey["LocalStack"]()


@pytest.fixture(autouse=True)
def api_exchanges_follow_the_document(request: pytest.FixtureRequest) -> Iterator[None]:
    if "stack" not in request.fixturenames:
        yield
        return
    stack: LocalStack = request.getfixturevalue("stack")
    stack.api_exchanges.start()
    request.node.stash[_STACK] = stack
    try:
        yield
    finally:
        stack.api_exchanges.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Checked once the test's body has run (it fails then, not its teardown)."""
    outcome = yield
    stack = item.stash.get(_STACK, None)
    if stack is not None:
        found = violations(stack.api_exchanges.taken())
        if found:
            pytest.fail("API exchanges outside the OpenAPI document:\n" + "\n".join(found), pytrace=False)
    return outcome
