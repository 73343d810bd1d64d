"""Emulator: SQS's rules on listing queues and on re-creating a deleted one, kept at the local endpoint.

- ListQueues (API reference; SQS Developer Guide): "If you do not set MaxResults, the response includes a
  maximum of 1,000 results and the NextToken value in the response is null." Confirmed. With MaxResults
  ("Value range is 1 to 1000", botocore's model) the answer holds at most that many URLs and a NextToken
  while more are left; the next request with it goes on from there. Answered here from moto's backend in
  SQS's JSON protocol, names in order, the token naming the last one given (opaque to callers, as AWS's),
  so a queue created or deleted between two pages neither repeats nor hides another. moto 5.2 caps at
  1,000 itself but takes MaxResults 0 (as if absent) and 1,001 (1,001 URLs). MaxResults out of range:
  InvalidParameterValue, HTTP 400, "Value 1001 for parameter MaxResults is invalid. Reason: Must be
  between 1 and 1000, if provided." UNVERIFIED: the wording is ReceiveMessage's MaxNumberOfMessages answer
  (confirmed from reports) with this parameter's range; a NextToken we never gave: the same code, "Invalid
  NextToken value." (unverified). The Query protocol (form bodies) gets the range check only; moto answers.
- DeleteQueue (API reference): "When you delete a queue, you must wait at least 60 seconds before
  creating a queue with the same name." CreateQueue within that time: code
  AWS.SimpleQueueService.QueueDeletedRecently (the x-amzn-query-error SDKs read; botocore's model has the
  QueueDeletedRecently shape, the JSON `__type` com.amazonaws.sqs#QueueDeletedRecently), HTTP 400, "You
  must wait 60 seconds after deleting a queue before you can create another with the same name."
  Confirmed (the code and message from reports of AWS's answer, 2017 to 2026; the `__type` is assumed as
  sqs_limits assumes its own). Reports show AWS refusing a little past 60 s at times; here exactly the
  wait. The wait is on the stack's clock: 60 s is the local stack's minute (`StackConfig.deleted_queue_
  wait_s`, 1 s as the runtime's async retries come 1 s and 2 s after a failure for Lambda's 1 and 3
  minutes), so a producer's retried message behaves as on AWS. Deletions are seen on DeleteQueue requests to the
  endpoint (the idle-queue job's, destroy's); queues CloudFormation deletes with a stack are not
  (moto's CloudFormation calls its backend directly and cannot roll back a create that fails).
"""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from moto.sqs.models import sqs_backends

from infra.local.sqs_limits import Refusal

Response = tuple[int, dict[str, str], bytes]

MOST_LISTED = 1000  # ListQueues' most URLs in one answer, with or without MaxResults
REUSE_WAIT_S = 60.0  # SQS's wait after DeleteQueue before a queue of the same name may be created
_JSON = "application/x-amz-json-1.0"


def max_results_refusal(value: Any) -> Refusal | None:
    """SQS's answer to a MaxResults out of 1..1000, or None."""
    if value is None:
        return None
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = 0
    if 1 <= n <= MOST_LISTED:
        return None
    message = f"Value {value} for parameter MaxResults is invalid. Reason: Must be between 1 and 1000, if provided."
    return Refusal("InvalidParameterValue", "com.amazon.coral.service#InvalidParameterValueException", message)


def _token(after: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"after": after}).encode()).decode()


def _after(token: str) -> str | None:
    try:
        after = json.loads(base64.urlsafe_b64decode(token.encode()))["after"]
    except (ValueError, KeyError, TypeError):
        return None
    return after if isinstance(after, str) else None


def list_queues(params: dict[str, Any], account: str, region: str, base_url: str) -> Response:
    """ListQueues as SQS answers it (JSON protocol): at most 1,000 URLs without MaxResults and no NextToken;
    pages of MaxResults with a NextToken while more are left."""
    refused = max_results_refusal(params.get("MaxResults"))
    if refused is not None:
        return refused.json()
    prefix = params.get("QueueNamePrefix") or ""
    names = sorted(n for n in list(sqs_backends[account][region].queues) if n.startswith(prefix))
    body: dict[str, Any] = {}
    if params.get("MaxResults") is None:
        listed = names[:MOST_LISTED]
    else:
        size = int(params["MaxResults"])
        if params.get("NextToken"):
            after = _after(str(params["NextToken"]))
            if after is None:
                return Refusal(
                    "InvalidParameterValue",
                    "com.amazon.coral.service#InvalidParameterValueException",
                    "Invalid NextToken value.",
                ).json()
            names = [n for n in names if n > after]
        listed = names[:size]
        if len(names) > size:
            body["NextToken"] = _token(listed[-1])
    if listed:
        body["QueueUrls"] = [f"{base_url}/{account}/{n}" for n in listed]
    headers = {"Content-Type": _JSON, "x-amzn-RequestId": str(uuid.uuid4())}
    return 200, headers, json.dumps(body).encode()


def deleted_recently() -> Refusal:
    return Refusal(
        "AWS.SimpleQueueService.QueueDeletedRecently",
        "com.amazonaws.sqs#QueueDeletedRecently",
        "You must wait 60 seconds after deleting a queue before you can create another with the same name.",
    )


class QueueReuse:
    """When each queue was deleted, on the stack's clock; a CreateQueue of its name too soon is refused.

    `wait_s` is SQS's 60 s on the stack's minute; `clock` the stack's (monotonic) time. `age` moves a
    deletion back, for a test that means to be past the wait without sleeping it."""

    def __init__(self, wait_s: float = REUSE_WAIT_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.wait_s = wait_s
        self.clock = clock
        self._deleted: dict[tuple[str, str, str], float] = {}  # (account, region, name) -> when
        self._lock = threading.Lock()

    def deleted(self, account: str, region: str, name: str) -> None:
        with self._lock:
            self._deleted[(account, region, name)] = self.clock()

    def refusal(self, account: str, region: str, name: str) -> Refusal | None:
        """SQS's answer to a CreateQueue of `name` now, or None when it may be created."""
        key = (account, region, name)
        with self._lock:
            at = self._deleted.get(key)
            if at is None:
                return None
            if self.clock() - at >= self.wait_s:
                del self._deleted[key]
                return None
        return deleted_recently()

    def age(self, name: str, seconds: float) -> None:
        """Pretend every deletion of `name` happened `seconds` earlier than it did."""
        with self._lock:
            for key in self._deleted:
                if key[2] == name:
                    self._deleted[key] -= seconds
