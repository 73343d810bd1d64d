"""Emulator: the reputation metrics SES publishes to CloudWatch (namespace AWS/SES), which moto never does.

SES publishes an account's `Reputation.BounceRate` and `Reputation.ComplaintRate` (no dimension; a rate
between 0 and 1) to CloudWatch (SES Developer Guide, "Creating reputation monitoring alarms using
CloudWatch"). This puts the local SES stand-in's (infra.local.ses: its sends over the last 24 hours, and
which of them bounced or complained at SES's mailbox simulator) into moto's CloudWatch once a minute, for
the accounts that sent in the last day: the operator's page reads them with GetMetricData, and the stage's
reputation alarms evaluate them (infra.local.alarms), as on AWS. SES weighs its rates over a representative
volume of recent email and says no more of how; the stand-in's is the last day's plain share.

A minute is `60 * time_scale` seconds, as for the alarms. Datapoints older than `KEEP_S` are dropped, at
most once a `FORGET_EVERY_S`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from infra.local.periodic import Periodic
from infra.local.sqs_metrics import FORGET_EVERY_S, KEEP_S, forget_before

NAMESPACE = "AWS/SES"
BOUNCE_RATE, COMPLAINT_RATE = "Reputation.BounceRate", "Reputation.ComplaintRate"


def datapoints(bounce_rate: float, complaint_rate: float, now_s: float) -> list[dict[str, Any]]:
    at = datetime.fromtimestamp(now_s, UTC).replace(tzinfo=None)  # moto keeps UTC times naive
    return [
        {"MetricName": BOUNCE_RATE, "Timestamp": at, "Value": bounce_rate, "Unit": "None"},
        {"MetricName": COMPLAINT_RATE, "Timestamp": at, "Value": complaint_rate, "Unit": "None"},
    ]


class SesMetrics(Periodic):
    name = "ses-metrics"

    def __init__(
        self,
        accounts: Callable[[], Iterable[str]],
        reputation: Callable[[str, float], tuple[int, float, float] | None],
        cloudwatch_backend: Callable[[str], Any],
        *,
        minute_s: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(minute_s)
        self._accounts = accounts
        self._reputation = reputation  # (account, now) -> (sends, bounce rate, complaint rate) of the last day
        self._backend = cloudwatch_backend  # account -> its CloudWatch backend
        self._clock = clock
        self._forgot_at = float("-inf")

    def tick(self) -> None:
        now = self._clock()
        for account in list(self._accounts()):
            rates = self._reputation(account, now)
            if rates is None:
                continue
            backend = self._backend(account)
            backend.put_metric_data(NAMESPACE, datapoints(rates[1], rates[2], now))
            if now - self._forgot_at >= FORGET_EVERY_S:  # a rebuild of moto's list: seldom (it scans all)
                self._forgot_at = now
                forget_before(backend, NAMESPACE, now - KEEP_S)
