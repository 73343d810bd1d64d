"""Which queue a tenant's emails go to: the tenant's own, or the shared free-plan queue.

The userId-to-queue-name mapping is injective within SQS's rules (at most 80 characters of
`[A-Za-z0-9_-]`): an id that fits as it is maps to `<prefix><id>`; any other id maps to a readable
prefix of it, `--`, and a hash of the whole id. Plain ids never contain `--` and hashed names always
do, so the two kinds cannot meet, and two hashed ids share a queue only if 96 bits of SHA-256 collide.
Nothing is ever truncated into somebody else's queue.
"""

from __future__ import annotations

import hashlib
import re

from chalicelib.core.errors import QueueNotOurs
from chalicelib.core.resources import Resources

MAX_QUEUE_NAME = 80
_PLAIN = re.compile(r"^[A-Za-z0-9_-]+\Z")
_HASH_CHARS = 24  # 96 bits, hex


def tenant_queue_name(resources: Resources, user_id: str) -> str:
    prefix = resources.tenant_queue_prefix
    room = MAX_QUEUE_NAME - len(prefix)
    if room < _HASH_CHARS + 8:
        raise ValueError(f"stage name too long for tenant queue names: {prefix!r}")
    if _PLAIN.match(user_id) and "--" not in user_id and len(user_id) <= room:
        return prefix + user_id
    readable = re.sub(r"[^A-Za-z0-9_]+", "-", user_id).strip("-")
    readable = re.sub(r"-{2,}", "-", readable)[: room - _HASH_CHARS - 2].strip("-")
    digest = hashlib.sha256(user_id.encode("utf-8")).hexdigest()[:_HASH_CHARS]
    return f"{prefix}{readable}--{digest}"


def is_free_queue(resources: Resources, queue_name: str) -> bool:
    """Whether the queue is the shared free-plan queue (the platform's rate, its own parking, never created or
    removed by a tenant's use): asked here only, so that the free queue is one name in one place."""
    return queue_name == resources.free_queue.name


def queue_for(resources: Resources, user_id: str, plan: str) -> str:
    """The queue a message of this tenant goes to."""
    if plan == "free":
        return resources.free_queue.name
    return tenant_queue_name(resources, user_id)


def is_our_queue(resources: Resources, queue_name: str) -> bool:
    return is_free_queue(resources, queue_name) or (
        queue_name.startswith(resources.tenant_queue_prefix)
        and len(queue_name) <= MAX_QUEUE_NAME
        and bool(_PLAIN.match(queue_name))
    )


def require_our_queue(resources: Resources, queue_name: str) -> str:
    if not is_our_queue(resources, queue_name):
        raise QueueNotOurs(f"queue {queue_name!r} does not belong to {resources.prefix}")
    return queue_name


def alarm_name(queue_name: str) -> str:
    return f"{queue_name}-not-empty"
