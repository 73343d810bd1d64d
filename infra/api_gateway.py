"""What API Gateway answers itself, before the API's function runs, written into the stage's REST API.

API Gateway answers a request for a path the API does not have with its own 403 `{"message": "Missing
Authentication Token"}`, a method a path does not take the same way, a throttled request with 429, a
function slower than 29 s with 504: none a problem detail, none in the OpenAPI document. The packaged
template (`add_own_answers`, after Chalice's package) gives each of them the API's shape:

- **Gateway responses** (`x-amazon-apigateway-gateway-responses`): every response type API Gateway has
  (botocore's `GatewayResponseType`) answers an RFC 9457 problem with its status, a detail saying what to do,
  and the request's id; a path the API does not have is `404`, not `403`.
- **A method a path does not take** is `405` with `Allow`, as RFC 9110 asks: each path's
  `x-amazon-apigateway-any-method` (which API Gateway takes for any method the path does not name) goes
  to the API's function, as `chalice local` always sent it, and Chalice's router answers.

Both are in the template's Swagger body, so a deploy of them is a deploy of the API (a separate
`AWS::ApiGateway::GatewayResponse` would wait for the stage's next deployment). The local stack serves
them from the same template (infra/local/api_gateway.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from chalicelib.api import problems

# What the local stack and the tests read in the Swagger body.
GATEWAY_RESPONSES = "x-amazon-apigateway-gateway-responses"
ANY_METHOD = "x-amazon-apigateway-any-method"
INTEGRATION = "x-amazon-apigateway-integration"
REQUEST_ID = "$context.requestId"  # API Gateway's id of the request, in the answer for support to find

# API Gateway's REST limits (its quotas page): what its own answers below are about.
MAX_BODY_BYTES = 10 * 1024 * 1024
INTEGRATION_TIMEOUT_S = 29


@dataclass(frozen=True)
class GatewayAnswer:
    status: int
    detail: str  # what happened and what to do; never a `$` or `#`: the body is a VTL template
    retry_after_s: int | None = None


_NO_ROUTE = "no route of the API has this path (they are in GET /openapi.json)"
_OURS = "the API's gateway is misconfigured; nothing was done: report it with the requestId"
_NOT_USED = "the API refused the request before it ran; nothing was done"

# Each response type of API Gateway (botocore's GatewayResponseType, its default status kept unless said).
# Keys, authorizers, validators and WAF are not used by this API: their types answer all the same.
ANSWERS: dict[str, GatewayAnswer] = {
    "MISSING_AUTHENTICATION_TOKEN": GatewayAnswer(404, _NO_ROUTE),  # API Gateway's 403 misleads: no key is missing
    "RESOURCE_NOT_FOUND": GatewayAnswer(404, _NO_ROUTE),
    "THROTTLED": GatewayAnswer(429, "too many requests to the API at once: retry after a second", 1),
    "QUOTA_EXCEEDED": GatewayAnswer(429, "the API's request quota is spent: retry later", 60),
    "REQUEST_TOO_LARGE": GatewayAnswer(413, f"the request is over the API's {MAX_BODY_BYTES // 2**20} MB"),
    "UNSUPPORTED_MEDIA_TYPE": GatewayAnswer(415, "the API does not take this Content-Type"),
    "BAD_REQUEST_BODY": GatewayAnswer(400, "the request's body is not what the API takes"),
    "BAD_REQUEST_PARAMETERS": GatewayAnswer(400, "the request's parameters are not what the API takes"),
    "UNAUTHORIZED": GatewayAnswer(401, "no API key: send Authorization: Bearer msk_..."),
    "ACCESS_DENIED": GatewayAnswer(403, _NOT_USED),
    "EXPIRED_TOKEN": GatewayAnswer(403, _NOT_USED),
    "INVALID_API_KEY": GatewayAnswer(403, _NOT_USED),
    "INVALID_SIGNATURE": GatewayAnswer(403, _NOT_USED),
    "WAF_FILTERED": GatewayAnswer(403, "the request was refused by the stage's web application firewall"),
    "INTEGRATION_TIMEOUT": GatewayAnswer(
        504,
        f"the API took longer than {INTEGRATION_TIMEOUT_S} s to answer; what was asked may still be done: "
        "read it back before asking again",
    ),
    "INTEGRATION_FAILURE": GatewayAnswer(504, "the API could not be reached; what was asked may still be done"),
    "API_CONFIGURATION_ERROR": GatewayAnswer(500, _OURS),
    "AUTHORIZER_CONFIGURATION_ERROR": GatewayAnswer(500, _OURS),
    "AUTHORIZER_FAILURE": GatewayAnswer(500, _OURS),
    # Any type API Gateway adds later: its status is not known to a template, so these two name one.
    # Setting their status sets it for every type that falls back to them: a function's failure (502) and a
    # refused invocation (a body over Lambda's 6 MB) are 500 too.
    "DEFAULT_4XX": GatewayAnswer(400, "the API's gateway could not read the request; nothing was done"),
    "DEFAULT_5XX": GatewayAnswer(
        500,
        "the API could not answer (one cause: a body over its 6 MB); what was asked may still have been done: "
        "read it back before asking again, and report it with the requestId",
    ),
}
METHOD_NOT_ALLOWED = 405


def problem_template(status: int, detail: str) -> str:
    """The problem's JSON as a VTL template: API Gateway puts the request's id in."""
    return json.dumps({**problems.problem(status, {"error": detail}), "requestId": REQUEST_ID})


def _headers(prefix: str, answer_headers: dict[str, str]) -> dict[str, str]:
    # A header's value in a mapping is a literal in single quotes.
    return {f"{prefix}.header.{name}": f"'{value}'" for name, value in answer_headers.items()}


def _problem_headers(retry_after_s: int | None = None) -> dict[str, str]:
    headers = {"Content-Type": problems.PROBLEM_JSON, "Cache-Control": "no-store"}
    if retry_after_s is not None:
        headers["Retry-After"] = str(retry_after_s)
    return headers


def gateway_responses() -> dict[str, Any]:
    return {
        kind: {
            "statusCode": str(a.status),
            "responseParameters": _headers("gatewayresponse", _problem_headers(a.retry_after_s)),
            "responseTemplates": {"application/json": problem_template(a.status, a.detail)},
        }
        for kind, a in ANSWERS.items()
    }


def method_refusal(integration: dict[str, Any]) -> dict[str, Any]:
    """The Swagger of `x-amazon-apigateway-any-method` for a path: what it does not take goes to the API's
    function (`integration`, the path's own), whose router answers 405 with the path's methods in Allow
    (Chalice's answer, a problem through chalicelib.api.answers.chalice_problems).

    A mock integration would spare the invocation, but API Gateway maps a mock's request by its
    Content-Type: a body it has no template for is passed through, or refused with 415."""
    return {
        "summary": "Any method the path does not take: 405 with Allow",
        "responses": {
            str(METHOD_NOT_ALLOWED): {
                "description": "a method the path does not take",
                "headers": {"Allow": {"type": "string"}},
            }
        },
        INTEGRATION: integration,
    }


HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch")


def add_own_answers(template: dict[str, Any]) -> dict[str, Any]:
    """The packaged template with API Gateway's own answers in its REST API's Swagger body."""
    body = template["Resources"]["RestAPI"]["Properties"]["DefinitionBody"]
    body[GATEWAY_RESPONSES] = gateway_responses()
    for operations in body["paths"].values():
        integration = next(op[INTEGRATION] for m, op in operations.items() if m in HTTP_METHODS)
        operations[ANY_METHOD] = method_refusal(integration)
    return template
