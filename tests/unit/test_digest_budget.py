"""A digest run's memory is bounded in bytes: it mails what it planned before it holds more than its budget.

The store and the pipeline are stand-ins here (what is measured is the run's own holding): the store makes
each recipient's rows as they are read, as DynamoDB's pages come, so every byte the run keeps is its own.
"""

from __future__ import annotations

import json
import tracemalloc
from types import SimpleNamespace

from chalicelib.core.digest_contract import DigestDefinition, Item
from chalicelib.digest import assembly
from chalicelib.digest.assembly import DigestAssembly
from chalicelib.ingest.precompile import PrecompileResult
from chalicelib.stores.digests import DigestState, RecipientDigest, StoredItem

NOW = 1_800_000_000.0
RECIPIENTS, ITEMS, ITEM_BYTES = 120, 10, 8000  # 9.6 MB of item data in all
BUDGET = 400 * 1024


class Store:
    """The digest's rows, made as they are read; the run's writes accepted and dropped."""

    def state(self, user_id, digest_id):
        return DigestState(DigestDefinition(digest_id, "s", "b", "cron(0 13 ? * WED *)", 7 * 86400.0, 50))

    def hold_run(self, *args):
        return True

    def release_run(self, *args):
        pass

    def retracted(self, user_id, digest_id):
        return frozenset()

    def recipients(self, user_id, digest_id, after=None, since=None):
        for n in range(RECIPIENTS):
            key = f"r{n:04d}@example.org"
            items = [
                StoredItem(Item(f"i{n}-{k}", "T", NOW - 3600 - k, {"text": f"{key}{k}" + "x" * ITEM_BYTES}), key, {})
                for k in range(ITEMS)
            ]
            yield RecipientDigest(key, items)

    def open_assembly(self, *args):
        return True

    def mark_mailed(self, *args):
        pass

    def drop_items(self, *args):
        pass

    def record_run(self, *args):
        pass


class Mailer:
    """The pipeline's stand-in: every email accepted, the bytes of each request's items noted."""

    def __init__(self):
        self.request_bytes: list[int] = []

    def handle_request(self, request):
        self.request_bytes.append(sum(len(json.dumps(r.metadata["items"])) for r in request.recipients))
        return PrecompileResult(request.user_id, request.campaign.id)


def test_a_run_holds_no_more_than_its_byte_budget_of_planned_items_however_many_recipients(monkeypatch):
    monkeypatch.setattr(assembly, "MAIL_BATCH_BYTES", BUDGET, raising=False)
    mailer = Mailer()
    tenants = SimpleNamespace(get=lambda user, fresh=False: SimpleNamespace(plan="paid", sender=None))
    runner = DigestAssembly(Store(), tenants, mailer, clock=lambda: NOW)  # type: ignore[arg-type]
    tracemalloc.start()
    try:
        run = runner.run("acme", "weekly", scheduled_at=NOW)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert run.emails == RECIPIENTS and run.items_mailed == RECIPIENTS * ITEMS
    one_recipient = ITEMS * (ITEM_BYTES + 200)
    # Each batch mailed held at most the budget and the one recipient that crossed it ...
    assert mailer.request_bytes and max(mailer.request_bytes) <= BUDGET + one_recipient
    assert len(mailer.request_bytes) >= RECIPIENTS * one_recipient // (BUDGET + one_recipient)
    # ... and the process's peak (counted by tracemalloc, every byte the run allocated and held at once)
    # is a few budgets, not the 9.6 MB of the digest's items (which holding every recipient would be).
    print(f"peak {peak} bytes, requests {mailer.request_bytes}")
    assert peak < 6 * BUDGET, f"peak {peak} bytes"
    assert peak < RECIPIENTS * ITEMS * ITEM_BYTES / 3
