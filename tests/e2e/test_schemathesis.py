"""Schemathesis, which nobody here wrote, against the local stack's API from the OpenAPI document
(chalicelib/control/openapi.json): for each operation a bounded number of requests generated from the
document (its examples first), with tenant A's key, each answer checked: no 5xx, a status, content type,
headers and body the document gives the operation, and nothing of tenant B's (its id, its campaign's id)
in any answer. An operation whose route app.py does not have yet is skipped, naming the route."""

from __future__ import annotations

import json
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
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
]
ROUTES = {(path, method) for path, methods in app.app.routes.items() for method in methods}

# Seeded; valid and invalid requests both (an invalid one must be answered 4xx); no methods the document does
# not name (the local server's answer to those is Chalice's, not the API's).
CONFIG = {"seed": 41, "generation": {"mode": "all"}, "phases": {"coverage": {"unexpected-methods": []}}}
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
        self.a_key = c.reports.issue_key(self.a)
        self.b_key = c.reports.issue_key(self.b)

    def of_b(self, content: bytes) -> list[str]:
        return [name for name in (self.b, self.b_campaign) if name.encode() in content]


@pytest.fixture(scope="module")
def tenants(stack: Any) -> Tenants:
    import uuid

    return Tenants(uuid.uuid4().hex[:8])


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_answer_is_one_the_document_gives_and_none_is_another_tenants(
    case: schemathesis.Case, stack: Any, tenants: Tenants
) -> None:
    route = (case.operation.path, case.method.upper())
    if route not in ROUTES:
        pytest.skip(f"{case.method.upper()} {case.operation.path}: not yet a route of app.py")
    response = case.call(base_url=stack.api_url, headers={"Authorization": f"Bearer {tenants.a_key}"}, timeout=30)
    case.validate_response(response, checks=CHECKS)
    assert tenants.of_b(response.content) == [], f"{case.method} {case.formatted_path} answered B's data"
