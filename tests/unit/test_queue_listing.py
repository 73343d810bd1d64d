"""Every listing of queues goes past SQS's first 1,000 (chalicelib.core.queue_listing): ListQueues without
MaxResults answers at most 1,000 URLs and no NextToken, which tests.fakes.sqs.ListedQueues answers too."""

from __future__ import annotations

from typing import Any

from chalicelib.core.config import Settings
from chalicelib.core.queue_listing import queue_urls
from infra.deploy import destroy_plan, email_at_risk
from infra.status import queue_depths
from tests.fakes.sqs import ListedQueues

ENDPOINT = "https://sqs.us-east-1.amazonaws.com/123456789012"
SETTINGS = Settings.from_env({"MOONSEND_STAGE": "dev"})
TENANTS = SETTINGS.resources.tenant_queue_prefix  # moonsend-dev-t-


class Queues(ListedQueues):
    """Listed as SQS lists them; every queue holds `held` messages."""

    def __init__(self, names: list[str], held: int = 0) -> None:
        super().__init__(f"{ENDPOINT}/{n}" for n in names)
        self.held = held

    def get_queue_attributes(self, *, QueueUrl: str, AttributeNames: list[str]) -> dict[str, Any]:
        counts = ("ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible")
        return {
            "Attributes": {
                n: str(self.held if n == counts[0] else 0) for n in [*counts, "ApproximateNumberOfMessagesDelayed"]
            }
        }


class Nothing:
    """CloudWatch, Scheduler and S3 with nothing to list."""

    class exceptions:  # boto3's name
        NoSuchBucket = KeyError

    def get_paginator(self, _name: str) -> Any:
        class Pages:
            def paginate(self, **_kw: Any) -> list[dict[str, Any]]:
                return [{}]

        return Pages()


def _tenant_queues(n: int) -> list[str]:
    return [f"{TENANTS}u{i:05d}" for i in range(n)]


def test_the_listing_pages_by_max_results_past_the_first_thousand():
    sqs = ListedQueues(f"{ENDPOINT}/{n}" for n in [*_tenant_queues(2_001), "other-app-q"])
    assert len(list(queue_urls(sqs, TENANTS))) == 2_001
    assert sqs.calls == 3


def test_destroy_deletes_every_tenant_queue_past_the_first_thousand():
    sqs = Queues(_tenant_queues(1_500))
    plan = destroy_plan("dev", sqs, Nothing(), Nothing(), delete_data=False, account_id="123456789012")
    deleted = [a.target for a in plan if a.kind == "delete-queue"]
    assert len(deleted) == 1_500 and f"{ENDPOINT}/{TENANTS}u01499" in deleted


def test_email_at_risk_counts_the_queues_past_the_first_thousand():
    at_risk = email_at_risk("dev", Queues(_tenant_queues(1_200), held=1), Nothing(), "123456789012")
    assert len(at_risk) == 1_200
    assert f"queue {TENANTS}u01199: about 1 queued email message(s)" in at_risk


def test_status_shows_every_queue_of_the_stage_past_the_first_thousand():
    depths = queue_depths(SETTINGS, Queues(_tenant_queues(1_001), held=2))
    assert len(depths) == 1_001 and depths[-1].name == f"{TENANTS}u01000" and depths[-1].visible == 2


def test_a_destroy_names_paused_campaigns_parked_email_as_well_as_scheduled_batches():
    from chalicelib.core.resources import PARKED_PREFIX, SCHEDULED_PREFIX

    class Stored(Nothing):
        def get_paginator(self, _name: str) -> Any:
            class Pages:
                def paginate(self, *, Bucket: str, Prefix: str) -> list[dict[str, Any]]:
                    n = {SCHEDULED_PREFIX: 2, PARKED_PREFIX: 3}.get(Prefix, 0)
                    return [{"Contents": [{"Key": f"{Prefix}{i}"} for i in range(n)]}]

            return Pages()

    at_risk = email_at_risk("dev", Queues([], held=0), Stored(), "123456789012")
    assert any(line.startswith("2 scheduled batch(es)") for line in at_risk)
    assert any(line.startswith("3 batch(es) of paused campaigns' parked email") for line in at_risk)
