"""Accelerator: a short path for the hot DynamoDB calls, past moto's generic request and response layers.

Every ledger, lease and counter call of the pipeline is a DynamoDB request: about nine per email. moto
answers each through Flask, its model-driven request parser and its model-driven response serialiser;
profiled on the soak, the serialiser alone was a quarter of moto's DynamoDB time and request set-up
another tenth. GetItem, PutItem, UpdateItem, DeleteItem, Query and BatchGetItem are answered here
instead, by moto's own `DynamoHandler` methods (so validation, conditions, expressions and state are
moto's) with the request's JSON as their input and their result written out as DynamoDB's JSON.

Key sizes and counts moto does not check are refused first, as DynamoDB refuses them (`dynamodb_limits`).
Anything this path does not vouch for returns None and goes to moto as before: other operations,
requests carrying binary attributes (moto's parser decodes their base64; stored ones are read back
here as base64), and errors that are not moto's own DynamoDB errors.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

from moto.core.exceptions import JsonRESTError
from moto.dynamodb.responses import DynamoHandler

from infra.local import dynamodb_limits

Response = tuple[int, dict[str, str], bytes]
_HOT = {
    "GetItem": "get_item",
    "PutItem": "put_item",
    "UpdateItem": "update_item",
    "DeleteItem": "delete_item",
    "Query": "query",
    "BatchGetItem": "batch_get_item",
}
_JSON = {"Content-Type": "application/x-amz-json-1.0"}


class _Handler(DynamoHandler):
    """moto's DynamoDB handler with its request already parsed: only what the action methods read."""

    def __init__(self, params: dict[str, Any], region: str, account: str) -> None:
        super().__init__()
        self.body = params
        self.params = params
        self.region = region
        self.current_account = account
        self.headers: Any = {}
        self.querystring: dict[str, Any] = {}


def account_for(access_key: str) -> str:
    """The account moto files this access key's tables under (as its own request set-up decides)."""
    if "MOTO_ACCOUNT_ID" in os.environ:
        return os.environ["MOTO_ACCOUNT_ID"]
    from moto.iam.models import get_account_id_from

    return get_account_id_from(access_key)


def handle(target: str, region: str, account: str, body: bytes) -> Response | None:
    method = _HOT.get(target.rpartition(".")[2])
    if method is None or b'"B"' in body or b'"BS"' in body:
        return None
    try:
        params = json.loads(body or b"{}")
    except ValueError:
        return None
    if not isinstance(params, dict):
        return None
    refused = dynamodb_limits.check(target.rpartition(".")[2], params, account, region)  # what moto lets through
    if refused is not None:
        return refused
    handler = _Handler(params, region, account)
    try:
        result = getattr(handler, method)()
    except JsonRESTError as exc:  # moto's DynamoDB errors carry their own JSON body, as moto's server sends it
        headers = {k: str(v) for k, v in (exc.get_headers() or [])}
        return int(exc.code), {**_JSON, **headers}, str(exc.description).encode()
    except Exception:
        return None
    return 200, dict(_JSON), json.dumps(result.result, default=_blob).encode()


def _blob(value: Any) -> str:
    """Binary attribute values as the wire carries them: base64."""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
