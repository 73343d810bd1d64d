"""Sending one email through SES v2 (Raw content), and telling SES's errors apart.

Each message goes out with its own tenant's keys and region (or the platform's, on the free plan),
whatever else is in the batch. SES's answers are sorted into what the drainer must do:
sent, throttled (pace down, retry), quota exhausted (stop), failed for good, or transient.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib import aws
from chalicelib.contract import Sender
from chalicelib.errors import QuotaExhausted, SendFailed, SendThrottled, TransientSendError

_THROTTLE_CODES = {"Throttling", "ThrottlingException", "TooManyRequestsException"}
_QUOTA_CODES = {"LimitExceededException", "SendingPausedException", "AccountSuspendedException"}
_PERMANENT_CODES = {
    "MessageRejected",
    "BadRequestException",
    "MailFromDomainNotVerifiedException",
    "InvalidParameterValue",
    "NotFoundException",
}
QUOTA_CACHE_S = 300.0


@dataclass(frozen=True)
class SendQuota:
    max_send_rate: float
    max_24h_send: float
    sent_last_24h: float


class SesSender:
    def __init__(self, platform_region: str) -> None:
        self._platform_region = platform_region
        self._quotas: dict[tuple[str, str], tuple[float, SendQuota]] = {}
        self._lock = threading.Lock()

    def _client(self, sender: Sender, platform: bool) -> Any:
        region = sender.region or self._platform_region
        if platform or not sender.has_own_account:
            return aws.send_client("sesv2", region)
        assert sender.api_key and sender.api_secret
        return aws.tenant_client("sesv2", region, sender.api_key, sender.api_secret)

    def quota(self, sender: Sender, *, platform: bool = False) -> SendQuota:
        """The SES account's own limits (GetAccount), cached for a few minutes."""
        key = (
            "platform" if platform or not sender.has_own_account else sender.api_key or "",
            sender.region or self._platform_region,
        )
        now = time.monotonic()
        with self._lock:
            hit = self._quotas.get(key)
            if hit and now - hit[0] < QUOTA_CACHE_S:
                return hit[1]
        q = self._client(sender, platform).get_account()["SendQuota"]
        quota = SendQuota(
            max_send_rate=float(q["MaxSendRate"]),
            max_24h_send=float(q["Max24HourSend"]),
            sent_last_24h=float(q["SentLast24Hours"]),
        )
        with self._lock:
            self._quotas[key] = (now, quota)
        return quota

    def send(self, sender: Sender, to: str, raw_mime: bytes, *, platform: bool = False) -> str:
        """Send and return SES's MessageId, or raise the error that says what to do next."""
        try:
            resp = self._client(sender, platform).send_email(
                FromEmailAddress=sender.email_address,
                Destination={"ToAddresses": [to]},
                Content={"Raw": {"Data": raw_mime}},
            )
        except ClientError as exc:
            raise classify(exc) from exc
        except BotoCoreError as exc:  # connection refused, read timeout, ...
            raise TransientSendError(f"{type(exc).__name__}: {exc}") from exc
        return str(resp["MessageId"])


def classify(exc: ClientError) -> Exception:
    err = exc.response.get("Error", {})
    code, message = str(err.get("Code", "")), str(err.get("Message", ""))
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    text = f"{code}: {message}"
    if "daily message quota" in message.lower() or code in _QUOTA_CODES:
        return QuotaExhausted(text)
    if code in _THROTTLE_CODES or status == 429:
        return SendThrottled(text)
    if code in _PERMANENT_CODES:
        return SendFailed(text)
    if status >= 500 or not status:
        return TransientSendError(text)
    return SendFailed(text)
