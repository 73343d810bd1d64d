"""Sending one email through SES v2 (Raw content), and telling SES's errors apart.

Each message goes out with its own tenant's keys and region (or the platform's, on the free plan),
whatever else is in the batch. SES's answers are sorted into what the drainer must do:
sent, throttled (pace down, retry), quota exhausted (stop), failed for good, or transient.

Every email is sent with the stage's configuration set, whose event destination is the events topic:
SES then publishes a `Send` event for each email it accepted, and that event records the email as sent
even if the drainer died before it could (chalicelib.feedback.ses_events). The platform's account gets the
configuration set with the platform's resources; a tenant's own account gets it here, on first use. If
the tenant's keys may not create it, the tenant's email goes out without it (and the log says so once).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ParamValidationError,
    ProxyConnectionError,
)

from chalicelib.core import aws, log
from chalicelib.core.contract import Sender
from chalicelib.core.errors import (
    KeysRejected,
    QuotaExhausted,
    SenderRefused,
    SendFailed,
    SendOutcomeUnknown,
    SendThrottled,
    TenantNotReady,
    TenantSendingPaused,
    TransientSendError,
)

# Errors raised before the request left: the email cannot have reached SES. (Any other botocore error
# may come after SES received it: SendOutcomeUnknown.)
_NOT_SENT = (EndpointConnectionError, ConnectTimeoutError, ProxyConnectionError, ParamValidationError)
_THROTTLE_CODES = {"Throttling", "ThrottlingException", "TooManyRequestsException"}
_QUOTA_CODES = {"LimitExceededException", "SendingPausedException", "AccountSuspendedException"}
# What STS answers for keys that are wrong, disabled or expired (not for its own trouble).
_KEYS_REFUSED_CODES = {
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "AccessDenied",
    "ExpiredToken",
    "UnrecognizedClientException",
    "AuthFailure",
}
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


EVENT_DESTINATION = "moonsend-events"
EVENT_TYPES = ["SEND", "REJECT", "BOUNCE", "COMPLAINT", "DELIVERY"]
# SES v2 says AlreadyExistsException; its v1 codes (which some SES-compatible endpoints answer v2 calls with)
# are tolerated.
_EXISTS = {
    "AlreadyExistsException",
    "ConfigurationSetAlreadyExists",
    "ConfigurationSetAlreadyExistsException",
    "EventDestinationAlreadyExists",
}


def ensure_configuration_set(client: Any, name: str, topic_arn: str) -> None:
    """Create the configuration set and its SNS event destination in the client's account (idempotent)."""
    try:
        client.create_configuration_set(ConfigurationSetName=name)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in _EXISTS:
            raise
    try:
        client.create_configuration_set_event_destination(
            ConfigurationSetName=name,
            EventDestinationName=EVENT_DESTINATION,
            EventDestination={
                "Enabled": True,
                "MatchingEventTypes": EVENT_TYPES,
                "SnsDestination": {"TopicArn": topic_arn},
            },
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in _EXISTS:
            raise


# Makes the SES v2 client a send goes through: (the Sender, whether it sends from the platform's account).
SesClients = Callable[[Sender, bool], Any]


class SesSender:
    def __init__(
        self,
        platform_region: str,
        configuration_set: str | None,
        events_topic_arn: str | None,
        *,
        clients: SesClients | None = None,
    ) -> None:
        """`configuration_set` and `events_topic_arn` None: SES's events are not published (MOONSEND_SES_EVENTS=0).

        `clients` None: boto3's SES v2 clients, with the platform's role or the tenant's own keys (a test gives
        its own, answering in memory)."""
        self._platform_region = platform_region
        self._clients: SesClients = clients or self._aws_client
        self._quotas: dict[tuple[str, str], tuple[float, SendQuota]] = {}
        self._lock = threading.Lock()
        self._configuration_set = configuration_set
        self._events_topic_arn = events_topic_arn
        self._ready: dict[tuple[str, str], bool] = {}  # tenant account -> has the configuration set
        self._ensuring: dict[tuple[str, str], threading.Lock] = {}

    def _configuration_set_for(self, sender: Sender, platform: bool, client: Any) -> str | None:
        name = self._configuration_set
        if not name or platform or not sender.has_own_account:
            return name  # the platform's account: provisioned with the platform
        key = (sender.api_key or "", sender.region or self._platform_region)
        with self._lock:
            ready = self._ready.get(key)
            if ready is None:
                guard = self._ensuring.setdefault(key, threading.Lock())
        if ready is not None:
            return name if ready else None
        with guard:  # one creation per account, however many send threads arrive at once
            with self._lock:
                ready = self._ready.get(key)
            if ready is not None:
                return name if ready else None
            try:
                ensure_configuration_set(client, name, self._events_topic_arn or "")
                ready = True
            except (ClientError, BotoCoreError) as exc:
                ready = False
                log.warning(
                    "tenant account without SES event publishing",
                    reason=f"{_code(exc)}: cannot create configuration set {name}",
                )
            with self._lock:
                self._ready[key] = ready
        return name if ready else None

    def account_of(self, sender: Sender) -> str:
        """The AWS account a tenant's keys belong to (STS GetCallerIdentity with those keys)."""
        assert sender.api_key and sender.api_secret
        region = sender.region or self._platform_region
        sts = aws.tenant_client("sts", region, sender.api_key, sender.api_secret)
        try:
            return str(sts.get_caller_identity()["Account"])
        except ClientError as exc:
            if _code(exc) in _KEYS_REFUSED_CODES:  # the keys' fault: the message is refused with why
                raise SenderRefused(f"sender.apiKey: AWS does not accept these keys ({_code(exc)})") from exc
            raise  # STS unavailable or throttled: the event is retried

    def _client(self, sender: Sender, platform: bool) -> Any:
        return self._clients(sender, platform)

    def _aws_client(self, sender: Sender, platform: bool) -> Any:
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

    def sending_enabled(self, sender: Sender, *, platform: bool = False) -> bool:
        """Whether the SES account's sending is enabled (GetAccount, read now). True if it cannot be read: a
        refusal is then taken to be the tenant's, which holds that tenant's email only."""
        try:
            return bool(self._client(sender, platform).get_account().get("SendingEnabled", True))
        except (ClientError, BotoCoreError) as exc:
            log.warning("SES account status unknown", error=_code(exc))
            return True

    def send(
        self, sender: Sender, to: str, raw_mime: bytes, *, platform: bool = False, tenant: str | None = None
    ) -> str:
        """Send and return SES's MessageId, or raise the error that says what to do next. `tenant`: the SES
        tenant of the platform's account it goes out through (chalicelib.stores.ses_tenants)."""
        if not platform and not sender.has_own_account:  # a tenant's email goes out with its keys or not at all
            raise SendFailed("no SES keys for a tenant's own account; never sent through the platform's account")
        client = self._client(sender, platform)
        params: dict[str, Any] = {
            "FromEmailAddress": sender.email_address,
            "Destination": {"ToAddresses": [to]},
            "Content": {"Raw": {"Data": raw_mime}},
        }
        configuration_set = self._configuration_set_for(sender, platform, client)
        if configuration_set:
            params["ConfigurationSetName"] = configuration_set
        if tenant is not None:
            params["TenantName"] = tenant
        try:
            resp = client.send_email(**params)
        except ClientError as exc:
            if tenant is not None:
                _raise_for_tenant(exc)
            raise classify(exc) from exc
        except _NOT_SENT as exc:  # the request never reached SES: safe to send again
            raise TransientSendError(f"{type(exc).__name__}: {exc}") from exc
        except BotoCoreError as exc:  # read timeout, connection closed: SES may have accepted it
            raise SendOutcomeUnknown(f"{type(exc).__name__}: {exc}") from exc
        return str(resp["MessageId"])


def _code(exc: Exception) -> str:
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", "ClientError"))
    return type(exc).__name__


def _raise_for_tenant(exc: ClientError) -> None:
    """A send through an SES tenant: SES's pause, and a tenant or resource it does not know, told apart."""
    code, message = _code(exc), str(exc.response.get("Error", {}).get("Message", ""))
    if code == "SendingPausedException":
        raise TenantSendingPaused(f"{code}: {message}") from exc
    if code in ("NotFoundException", "BadRequestException") and "tenant" in message.lower():
        raise TenantNotReady(f"{code}: {message}") from exc


def classify(exc: ClientError) -> Exception:
    err = exc.response.get("Error", {})
    code, message = str(err.get("Code", "")), str(err.get("Message", ""))
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    text = f"{code}: {message}"
    if "daily message quota" in message.lower() or code in _QUOTA_CODES:
        return QuotaExhausted(text)
    if code in _THROTTLE_CODES or status == 429:
        return SendThrottled(text)
    if code in _KEYS_REFUSED_CODES:
        return KeysRejected(text)
    if code in _PERMANENT_CODES:
        return SendFailed(text)
    if status >= 500 or not status:
        return TransientSendError(text)
    return SendFailed(text)
