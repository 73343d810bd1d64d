"""webhook_events' batch: the ledger's changes made into webhook events, and their campaigns noted for the recount.

One consumer of the ledger's stream does both (a DynamoDB stream serves at most two readers a shard). The
fanout answers which records to give again (chalicelib.webhooks.fanout); the note comes after it, for the
whole batch: if it cannot be written, every record is given again, since the note is what lets the recount
restore a count a killed handler lost (chalicelib.jobs.recount). The fanout's events come again then with
their own ids, which receivers drop as repeats.
"""

from __future__ import annotations

from typing import Any, Protocol

from chalicelib.core import log
from chalicelib.stores.ports.events import RecountNotes


class StreamBatches(Protocol):
    """What makes a batch of the stream into webhook events (chalicelib.webhooks.fanout.WebhookFanout)."""

    def batch(self, records: list[dict[str, Any]]) -> dict[str, Any]: ...


class LedgerStream:
    def __init__(self, fanout: StreamBatches, notes: RecountNotes) -> None:
        self._fanout = fanout
        self._notes = notes

    def batch(self, records: list[dict[str, Any]]) -> dict[str, Any]:
        """Lambda's answer for a batch of the stream (ReportBatchItemFailures): the records to give again."""
        answer = self._fanout.batch(records)
        try:
            self._notes.note(changed_campaigns(records))
        except Exception as exc:
            first = _sequence_number(records[0]) if records else None
            log.error("campaigns not noted for their recount: the batch comes again", error=type(exc).__name__)
            return {"batchItemFailures": [{"itemIdentifier": first}] if first else []}
        return answer


def changed_campaigns(records: list[dict[str, Any]]) -> set[str]:
    """The ledger partitions (campaigns) these records wrote; a TTL's delete changes nothing to count."""
    out = set()
    for record in records:
        try:
            if record.get("eventName") in ("INSERT", "MODIFY"):
                out.add(str(record["dynamodb"]["Keys"]["pk"]["S"]))
        except (KeyError, TypeError):
            continue  # not of the ledger's shape: the fanout logs it
    return out


def _sequence_number(record: dict[str, Any]) -> str | None:
    try:
        return str(record["dynamodb"]["SequenceNumber"])
    except (KeyError, TypeError):
        return None
