"""The unit layer: pure code and in-memory fakes (tests/fakes), nothing else.

No local stack, no moto, no socket: `make test` runs this layer in a process of its own (and it passes with
networking off: `unshare -n`), so none of the local stack's process-wide patches can be active while product
code is under test. The checks below hold the layer to that. In a run of every layer in one process (plain
`pytest`), tests/conftest.py puts this layer first, before any stack is started."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest


@pytest.fixture
def stack() -> None:
    pytest.fail("a unit test may not use the local stack: it belongs in tests/contract or tests/e2e")


def _patches_of_the_world() -> list[str]:
    """What the local stack would have patched in this process (infra/local: identity, direct_calls,
    environment, keepalive, fast_sqs, fast_dynamodb), found patched."""
    import botocore.credentials
    import botocore.endpoint

    found = []
    if type(os.environ) is not os._Environ:
        found.append("os.environ (infra/local/environment.py)")
    if botocore.endpoint.Endpoint._send.__module__ != "botocore.endpoint":
        found.append("botocore Endpoint._send (infra/local/direct_calls.py)")
    if botocore.credentials.create_credential_resolver.__module__ != "botocore.credentials":
        found.append("botocore's credential resolver (infra/local/identity.py)")
    if ThreadPoolExecutor.submit.__module__ != "concurrent.futures.thread":
        found.append("ThreadPoolExecutor.submit (infra/local/identity.py)")
    found += [f"{name} imported" for name in ("moto", "werkzeug", "infra.local.stack") if name in sys.modules]
    return found


@pytest.fixture(scope="package", autouse=True)
def the_world_is_unpatched() -> Iterator[None]:
    assert _patches_of_the_world() == [], "the unit layer runs in a process with no local stack"
    yield
    assert _patches_of_the_world() == [], "a unit test started something of the local stack"
