"""boto3 clients, made once per container and shared by every invocation.

boto3 follows `AWS_ENDPOINT_URL` (and `AWS_ENDPOINT_URL_<SERVICE>`) by itself, which is how the same
code talks to AWS's own endpoints when deployed and to another endpoint wherever that variable is set.

All clients come from one boto3 session, so the service models are loaded from disk once (a fresh
session costs ~100 ms of CPU per client), and each client is created once: concurrent first calls
for the same client wait for the one being made instead of making their own.
"""

from __future__ import annotations

import threading
from typing import Any

import boto3
import botocore
from botocore.config import Config

# A fixed User-Agent: botocore otherwise builds it twice per request from a dozen sanitised parts, about
# 0.1 ms of CPU per call (measured: bench/cpu_per_email.py), for a header nothing of ours reads.
USER_AGENT = f"moonsend Boto3/{boto3.__version__} Botocore/{botocore.__version__}"
_CONFIG = Config(retries={"mode": "standard", "max_attempts": 3}, max_pool_connections=64, user_agent=USER_AGENT)
# Sends are never retried by botocore: a retried SES call can deliver twice, and throttling is the
# sender's to pace, not the SDK's to hide.
_SEND_CONFIG = Config(
    retries={"mode": "standard", "total_max_attempts": 1}, max_pool_connections=64, user_agent=USER_AGENT
)

# A call that must fit in what is left of a short function (the sweeper's metric, after its minute's sweep):
# quick timeouts and one retry, so that a slow service costs seconds, not the invocation.
_BRIEF_CONFIG = Config(
    connect_timeout=2,
    read_timeout=5,
    retries={"mode": "standard", "total_max_attempts": 2},
    max_pool_connections=8,
    user_agent=USER_AGENT,
)

# pynamodb's own client settings (15 s to connect, 30 s to read, four attempts), with the fixed User-Agent.
_TABLE_CONFIG = Config(
    parameter_validation=False,
    connect_timeout=15,
    read_timeout=30,
    retries={"mode": "standard", "total_max_attempts": 4},
    max_pool_connections=64,
    user_agent=USER_AGENT,
)

_lock = threading.Lock()
_session: boto3.session.Session | None = None
_clients: dict[tuple[str, ...], Any] = {}


def _get(key: tuple[str, ...], make: Any) -> Any:
    found = _clients.get(key)
    if found is not None:
        return found
    with _lock:  # boto3 sessions are not thread-safe while they create clients
        found = _clients.get(key)
        if found is None:
            global _session
            if _session is None:
                _session = boto3.session.Session()
            found = make(_session)
            _clients[key] = found
        return found


def client(service: str, region: str) -> Any:
    """The platform's own client for a service (the Lambda role's credentials)."""
    return _get(("platform", service, region), lambda s: s.client(service, region_name=region, config=_CONFIG))


def brief_client(service: str, region: str) -> Any:
    """The platform's client for calls that must end within seconds (quick timeouts, one retry)."""
    return _get(
        ("platform-brief", service, region), lambda s: s.client(service, region_name=region, config=_BRIEF_CONFIG)
    )


def send_client(service: str, region: str) -> Any:
    """The platform's client for sending (free plan): no SDK retries, as for tenants."""
    return _get(
        ("platform-send", service, region),
        lambda s: s.client(service, region_name=region, config=_SEND_CONFIG),
    )


def tenant_client(service: str, region: str, access_key: str, secret_key: str) -> Any:
    """A client with a tenant's own keys. Keyed by the keys, so two tenants never share one."""
    return _get(
        ("tenant", service, region, access_key, secret_key),
        lambda s: s.client(
            service,
            region_name=region,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            config=_SEND_CONFIG,
        ),
    )


def table_client(region: str, table: str) -> Any:
    """The DynamoDB client of one pynamodb model (chalicelib.stores.tables): its own connection pool, as
    pynamodb would give it, but from the shared session. pynamodb makes a botocore session per model, which
    loads DynamoDB's service model again (about 50 ms of CPU each at a cold start), and its clients build the
    full User-Agent on every call."""
    return _get(("table", region, table), lambda s: s.client("dynamodb", region_name=region, config=_TABLE_CONFIG))


def reset() -> None:
    """Forget every client and the session (after the endpoint or the credentials changed)."""
    global _session
    with _lock:
        _clients.clear()
        _session = None


# The error codes SQS answers for a queue that does not exist (the query and the JSON protocol's).
NO_SUCH_QUEUE = ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist")
