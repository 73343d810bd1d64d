"""AWS clients keep enough pooled connections that busy threads never open one per request."""

import logging
from concurrent.futures import ThreadPoolExecutor

from chalicelib import aws, wiring
from chalicelib.config import http_pool_size
from chalicelib.drainer import SEND_WORKERS
from chalicelib.lease import LeaseModel
from chalicelib.tables import _bind, warm


class _PoolFull(logging.Handler):
    """urllib3 warns each time it drops a connection because its pool is full (one made per request)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.dropped = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "Connection pool is full" in record.getMessage():
            self.dropped += 1


def _dropped_with(pool_size: int, threads: int, table: str, region: str, calls: int = 2) -> int:
    model = _bind(LeaseModel, table, region, pool_size)
    warm(model)  # its client made once, not by every thread at its first call
    watcher = _PoolFull()
    logger = logging.getLogger("urllib3.connectionpool")
    logger.addHandler(watcher)
    try:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(
                pool.map(lambda i: [model.count(f"q-{i}", consistent_read=True) for _ in range(calls)], range(threads))
            )
    finally:
        logger.removeHandler(watcher)
    return watcher.dropped


def test_by_default_a_client_keeps_a_connection_for_each_sender_thread():
    assert http_pool_size({}) >= SEND_WORKERS
    assert http_pool_size({"MOONSEND_HTTP_POOL_SIZE": "1024"}) == 1024


def test_the_local_stack_gives_its_shared_clients_room_for_every_drain_at_once(stack):
    s = wiring.container().settings
    assert aws.client("sqs", s.region).meta.config.max_pool_connections == 1024
    table = s.resources.leases_table.name
    # The check can fail: a pool smaller than the threads drops (and so reopens) connections...
    assert _dropped_with(2, 16, table, s.region, calls=5) > 0
    # ...and the local stack's does not, with more threads than one sender has.
    assert _dropped_with(http_pool_size(), 2 * SEND_WORKERS, table, s.region) == 0
