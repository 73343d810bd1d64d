"""Several drainers on one queue: how many a rate needs, and the share of it each one sends.

One drainer (one Lambda, one queue, one lease) sends at most `Settings.drainer_max_rate` emails a
second: each email costs it a few ms of CPU (claim, MIME, the SES call, the record). A tenant whose
rate is above that is drained by N = ceil(rate / max) drainers at once, each holding its own lease
slot (slot 0 is the queue's usual lease, slot k the lease `<queue>#k`).

The shares are bands, not equal parts: slot 0 sends up to `max` a second, slot 1 the next `max`, and
the last slot what is left (1,000/s with max 300: 300, 300, 300, 100). Each slot's own limiter keeps
its band in every one-second window at SES (chalicelib.send.rate_limiter), so together they never
exceed the sum of the bands, which is the rate. Bands, because each slot computes its share from the
rates it has itself seen, with no shared state: a band grows with the rate (never shrinks as the rate
rises), so while slots disagree about a queue's rate (a campaign at a new rate, read first by one of
them) the sum of their bands stays within the highest rate any of them has seen, which the queue may
reach. Equal parts lack that property (200/s is one drainer at 200, 201/s two at 100.5: a slot still
at 200 beside one already at 100.5 sends 300.5 a second).

A fixed share costs no write per email, where a token bucket shared in DynamoDB costs one conditional
write per block of tokens and a read-modify-write race per drainer; the price of bands is a last slot
that may have little to do, and a slot that receives email whose rate needs fewer drainers hands it
back and ends (chalicelib.send.delivery).

Above `max`, rates are split in whole emails (300.5/s goes as 300): a fractional band would let its
slot send one email in a window where the others already sent their whole bands.
"""

from __future__ import annotations

import math

SLOT_SEPARATOR = "#"


def drainers_for(rate: float, max_rate: int) -> int:
    """How many drainers send `rate` emails a second, each at most `max_rate`."""
    if rate <= max_rate:
        return 1
    return math.ceil(math.floor(rate) / max_rate)


def share(rate: float, slot: int, max_rate: int) -> float:
    """What drainer `slot` sends of `rate` (0: this slot is not needed at this rate)."""
    if rate <= max_rate:
        return rate if slot == 0 else 0.0
    return float(min(max(math.floor(rate) - slot * max_rate, 0), max_rate))


def queue_of_lease(key: str) -> str:
    """The queue a lease item is of, whichever drainer's slot it is."""
    return key.split(SLOT_SEPARATOR, 1)[0]


def lease_key(queue: str, slot: int) -> str:
    """The lease item of drainer `slot` on `queue` (slot 0's is the queue's name, as with one drainer)."""
    return queue if slot == 0 else f"{queue}{SLOT_SEPARATOR}{slot}"
