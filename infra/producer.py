"""Publishing a campaign to PrecompileEmail, as a producer (MoonMail's lists service) would.

Recipients are packed into the batched message form (`recipients: [...]`), a few hundred per SNS
message and under SNS's 256 KiB, and the messages are published with PublishBatch, 10 per call and
under 256 KiB per call. Any AWS SDK can do the same against the local endpoint.
"""

from __future__ import annotations

import csv
import json
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SNS_MAX_BYTES = 256 * 1024
MESSAGE_BUDGET = SNS_MAX_BYTES - 8 * 1024  # room for attributes and the envelope
DEFAULT_PER_MESSAGE = 200


@dataclass(frozen=True)
class CampaignSpec:
    user_id: str
    sender: dict[str, Any]
    subject: str
    body: str
    campaign_id: str = ""
    plan: str | None = None
    # More campaign fields: {"scheduledAt": "2026-12-01T09:00:00+01:00", "expiresAfter": "PT2H"}, ...
    options: dict[str, Any] = field(default_factory=dict)

    def envelope(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "userId": self.user_id,
            "sender": self.sender,
            "campaign": {"id": self.campaign_id, "subject": self.subject, "body": self.body, **self.options},
        }
        if self.plan:
            d["userPlan"] = self.plan
        return d


def new_campaign_id() -> str:
    return f"c-{uuid.uuid4().hex[:12]}"


def read_recipients(path: Path) -> list[dict[str, Any]]:
    """A CSV with an `email` column (every other column is metadata) or JSONL of recipients."""
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        out = []
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                out.append(json.loads(line))
        return out
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return [
        {"email": (row.pop("email", "") or "").strip(), "metadata": {k: v for k, v in row.items() if k}} for row in rows
    ]


def messages(
    spec: CampaignSpec, recipients: Iterable[dict[str, Any]], per_message: int = DEFAULT_PER_MESSAGE
) -> Iterator[str]:
    """Batched PrecompileEmail messages, each at most `per_message` recipients and under budget."""
    envelope = spec.envelope()
    base = len(json.dumps({**envelope, "recipients": []}, ensure_ascii=False).encode())
    if base > MESSAGE_BUDGET:
        raise ValueError("the campaign's templates alone are larger than an SNS message")
    chunk: list[dict[str, Any]] = []
    size = base
    for r in recipients:
        n = len(json.dumps(r, ensure_ascii=False).encode()) + 1
        if chunk and (len(chunk) >= per_message or size + n > MESSAGE_BUDGET):
            yield json.dumps({**envelope, "recipients": chunk}, ensure_ascii=False)
            chunk, size = [], base
        chunk.append(r)
        size += n
    if chunk:
        yield json.dumps({**envelope, "recipients": chunk}, ensure_ascii=False)


def publish(sns: Any, topic_arn: str, bodies: Iterable[str]) -> int:
    """PublishBatch: 10 entries and 256 KiB per call. Returns the number of SNS messages."""
    count = 0
    batch: list[dict[str, str]] = []
    size = 0

    def flush() -> None:
        nonlocal batch, size
        if not batch:
            return
        resp = sns.publish_batch(TopicArn=topic_arn, PublishBatchRequestEntries=batch)
        if resp.get("Failed"):
            raise RuntimeError(f"SNS refused {len(resp['Failed'])} messages: {resp['Failed'][0]}")
        batch, size = [], 0

    for body in bodies:
        n = len(body.encode())
        if batch and (len(batch) == 10 or size + n > SNS_MAX_BYTES):
            flush()
        batch.append({"Id": str(len(batch)), "Message": body})
        size += n
        count += 1
    flush()
    return count
