"""Schemathesis, which nobody here wrote, against the local stack's API from the OpenAPI document
(chalicelib/control/openapi.json): for each operation a bounded number of requests generated from the
document (its examples first), with tenant A's key, each answer checked: no 5xx, a status, content type,
headers and body the document gives the operation, and nothing of tenant B's (its id, its campaign's id)
in any answer; and each path asked with every method it does not take (405 with Allow). An operation whose
route app.py does not have yet is skipped, naming the route. Paths the document does not have:
tests/e2e/test_api_hostile.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
    unsupported_method,
)

import app
from chalicelib import wiring
from chalicelib.control import openapi
from chalicelib.core.contract import Sender

pytestmark = pytest.mark.e2e

EXAMPLES_PER_OPERATION = 25
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    unsupported_method,
]
PATHS = set(app.app.routes)

# Seeded; valid and invalid requests both (an invalid one must be answered 4xx); and each path asked with
# every method it does not take, TRACE among them: 405 with Allow (the local gateway routes as the template's
# REST API does, infra/local/api_gateway.py; schemathesis does not send HEAD: tests/local does).
UNEXPECTED = ["get", "put", "post", "delete", "options", "patch", "trace"]
CONFIG = {"seed": 41, "generation": {"mode": "all"}, "phases": {"coverage": {"unexpected-methods": UNEXPECTED}}}
schema = schemathesis.openapi.from_dict(json.loads(openapi.document()), config=schemathesis.Config.from_dict(CONFIG))


class Tenants:
    def __init__(self, uid: str) -> None:
        c = wiring.container()
        self.a, self.b = f"st-a-{uid}", f"st-b-{uid}"
        self.b_campaign = f"b-only-{uid}"
        for user in (self.a, self.b):
            sender = Sender(f"news@{user}.example", "N", None, None, None, 1.0)
            c.tenants.accept(user, "free", sender, c.ses.account_of)
        # A's campaign has the document's example id, so that the examples reach a campaign that exists.
        c.stats.add(self.a, "spring-sale", queued=1)
        c.stats.add(self.b, self.b_campaign, queued=1)
        self.a_key = c.api_keys.replace_all(self.a)
        self.b_key = c.api_keys.replace_all(self.b)

    def of_b(self, content: bytes) -> list[str]:
        return [name for name in (self.b, self.b_campaign) if name.encode() in content]


@pytest.fixture(scope="module")
def tenants(stack: Any) -> Tenants:
    import uuid

    return Tenants(uuid.uuid4().hex[:8])


FUZZER_ADDRESS = "127.0.0.2"


class FromItsOwnAddress(requests.adapters.HTTPAdapter):
    """Connections from FUZZER_ADDRESS: the console's sign-in counts wrong keys per client address
    (chalicelib.console.guard), and the keys this test makes up must not close the sign-in to the address the
    other tests of the stack sign in from (as one abusive client does not hold up another)."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        kwargs["source_address"] = (FUZZER_ADDRESS, 0)
        super().init_poolmanager(*args, **kwargs)


@pytest.fixture(scope="module")
def fuzzer() -> Any:
    session = requests.Session()
    session.mount("http://", FromItsOwnAddress())
    yield session
    session.close()


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_answer_is_one_the_document_gives_and_none_is_another_tenants(
    case: schemathesis.Case, stack: Any, tenants: Tenants, fuzzer: requests.Session
) -> None:
    if case.operation.path not in PATHS:
        pytest.skip(f"{case.operation.path}: not yet a route of app.py")
    response = case.call(
        base_url=stack.api_url, session=fuzzer, headers={"Authorization": f"Bearer {tenants.a_key}"}, timeout=30
    )
    case.validate_response(response, checks=CHECKS)
    assert tenants.of_b(response.content) == [], f"{case.method} {case.formatted_path} answered B's data"
