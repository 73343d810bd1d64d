"""`side`: each contract test runs twice, against the fake ("fake") and the real store on the local stack ("real").

Only the real side asks for the session's local stack, so the fake side of a contract runs in milliseconds."""

from __future__ import annotations

from typing import Any

import pytest

SIDES = ("fake", "real")


@pytest.fixture(params=SIDES)
def side(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def real_container(request: pytest.FixtureRequest) -> Any:
    """The container of this process over the local stack, built as chalicelib.wiring builds a function's."""
    request.getfixturevalue("stack")
    from chalicelib import wiring

    return wiring.container()
