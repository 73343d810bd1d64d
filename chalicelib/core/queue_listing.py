"""Every queue whose name starts with a prefix: the one way moonsend lists queues.

SQS's ListQueues without MaxResults answers at most 1,000 queue URLs and no NextToken (SQS Developer Guide:
"If you do not set MaxResults, the response includes a maximum of 1,000 results and the NextToken value in
the response is null"), and botocore's `list_queues` paginator sends MaxResults only when its
PaginationConfig has a PageSize. A listing without one stops at 1,000 queues, silently: a stage with more
paid tenants than that had queues the sweeper never looked at and a destroy left behind. So every listing
(the sweeper, `moonsend status`, destroy and its count of email at risk) pages through here.
"""

from __future__ import annotations

from collections.abc import Iterator

from chalicelib.core.ports import SqsQueueLister

PAGE_SIZE = 1000  # SQS's most per page (MaxResults is 1 to 1,000)


def queue_urls(sqs: SqsQueueLister, prefix: str) -> Iterator[str]:
    """The URL of every queue whose name starts with `prefix`, page after page."""
    pages = sqs.get_paginator("list_queues").paginate(QueueNamePrefix=prefix, PaginationConfig={"PageSize": PAGE_SIZE})
    for page in pages:
        yield from page.get("QueueUrls", [])
