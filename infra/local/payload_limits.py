"""Emulator: Lambda's and SNS's payload limits, refused at the local endpoint as AWS refuses them.

moto checks neither Lambda's (it runs no function here: the runtime does) nor SNS's in bytes: it counts an
SNS message in characters, so a message of 100,000 three-byte characters (300,000 bytes) passed locally and
would be refused by SNS. Each decision is data (status, headers, body), made from the request alone.

- Lambda Invoke (the API reference): "For synchronous invocations, the maximum payload size is 6 MB. For
  asynchronous invocations, the maximum payload size is 1 MB." Over it: RequestTooLargeException, HTTP 413
  (botocore's model). The message, "Request must be smaller than 6291456 bytes for the InvokeFunction
  operation", is the one public reports quote for a synchronous call; the asynchronous one is assumed to
  name its own limit in the same words (unverified).
- SNS Publish: a message of at most 262,144 bytes ("256 KiB"); over it, InvalidParameter, "Invalid
  parameter: Message too long" (moto's own words for the same check, counted in characters there).
  PublishBatch: at most 262,144 bytes for all the entries' messages together; over it,
  BatchRequestTooLong (botocore's model), "The length of all the messages put together is more than the
  limit." (the model's documentation of that error). Message attributes are not counted here: no code
  of ours sends any.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping

Response = tuple[int, dict[str, str], bytes]

LAMBDA_SYNC_MAX_BYTES = 6 * 1024 * 1024
LAMBDA_ASYNC_MAX_BYTES = 1024 * 1024
SNS_MAX_BYTES = 256 * 1024


def lambda_refusal(invocation_type: str, payload_bytes: int) -> Response | None:
    """Lambda's answer to an Invoke whose payload is over the limit of its invocation type, or None."""
    limit = LAMBDA_ASYNC_MAX_BYTES if invocation_type == "Event" else LAMBDA_SYNC_MAX_BYTES
    if payload_bytes <= limit:
        return None
    body = {"Type": "User", "message": f"Request must be smaller than {limit} bytes for the InvokeFunction operation"}
    headers = {"Content-Type": "application/json", "x-amzn-ErrorType": "RequestTooLargeException"}
    return 413, headers, json.dumps(body).encode()


def sns_refusal(form: Mapping[str, str]) -> Response | None:
    """SNS's answer to a Publish or PublishBatch whose messages are over 256 KiB in bytes, or None."""
    action = form.get("Action")
    if action == "Publish":
        if len(form.get("Message", "").encode("utf-8")) > SNS_MAX_BYTES:
            return _sns_error("InvalidParameter", "Invalid parameter: Message too long")
    elif action == "PublishBatch":
        total = sum(len(v.encode("utf-8")) for k, v in form.items() if k.endswith(".Message"))
        if total > SNS_MAX_BYTES:
            return _sns_error(
                "BatchRequestTooLong", "The length of all the messages put together is more than the limit."
            )
    return None


def _sns_error(code: str, message: str) -> Response:
    request_id = str(uuid.uuid4())
    body = (
        '<ErrorResponse xmlns="http://sns.amazonaws.com/doc/2010-03-31/">'
        f"<Error><Type>Sender</Type><Code>{code}</Code><Message>{message}</Message></Error>"
        f"<RequestId>{request_id}</RequestId></ErrorResponse>"
    )
    return 400, {"Content-Type": "text/xml", "x-amzn-RequestId": request_id}, body.encode()
