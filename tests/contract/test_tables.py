"""Bound pynamodb models use the platform's shared boto3 session (chalicelib.stores.tables)."""

from typing import Any

import pytest

from chalicelib import wiring
from chalicelib.core import aws
from chalicelib.stores.ledger_model import LedgerModel
from chalicelib.stores.tables import bound


def _ledger_model() -> type[LedgerModel]:
    """The ledger's model, bound here for the first time: a stack started in this process since another test
    bound the ledger (tests/local start their own) resets the shared clients, and a model bound before keeps
    the client it was given then."""

    class Ledger(LedgerModel):  # a class of its own, so no other test has bound it
        pass

    settings = wiring.container().settings
    return bound(Ledger, settings.resources.ledger_table.name, settings.region)


def test_a_bound_model_calls_dynamodb_through_the_shared_sessions_client(stack, uid):
    model = _ledger_model()
    # Its request goes through the shared session's client, as an observer of that client sees: if a new
    # pynamodb version kept its client elsewhere, it would make one of its own, this would fail and the
    # session per model come back.
    shared = aws.table_client(model.Meta.region, model.Meta.table_name)
    seen: list[str] = []

    def note(**call: Any) -> None:
        seen.append(call["model"].name)  # the operation's model, as botocore passes it

    shared.meta.events.register("before-call.dynamodb", note)
    try:
        with pytest.raises(model.DoesNotExist):  # a real call, answered
            model.get(f"u{uid}#c1", f"nobody-{uid}@example.org")
    finally:
        shared.meta.events.unregister("before-call.dynamodb", note)
    assert seen == ["GetItem"]


def test_a_model_bound_before_the_clients_were_reset_calls_through_the_new_shared_client(stack, uid):
    """A stack started in the process (or an endpoint moved) resets the shared clients: a model bound and used
    before follows, as every other client does, rather than keep a client of the old endpoint."""
    model = _ledger_model()
    with pytest.raises(model.DoesNotExist):  # bound, and its client made and used
        model.get(f"u{uid}#c1", f"nobody-{uid}@example.org")
    aws.reset()
    # As a restarted endpoint does it: the containers go too, so that no function of the session's stack keeps
    # a client the tests' `aws.client(...)` no longer returns (test_exactly_once_e2e observes the drainer's).
    wiring.reset()
    shared = aws.table_client(model.Meta.region, model.Meta.table_name)
    seen: list[str] = []

    def note(**call: Any) -> None:
        seen.append(call["model"].name)

    shared.meta.events.register("before-call.dynamodb", note)
    try:
        with pytest.raises(model.DoesNotExist):
            model.get(f"u{uid}#c1", f"nobody-{uid}@example.org")
    finally:
        shared.meta.events.unregister("before-call.dynamodb", note)
    assert seen == ["GetItem"]


def test_a_bound_models_requests_carry_the_fixed_user_agent(stack, uid):
    model = _ledger_model()
    client = aws.table_client(model.Meta.region, model.Meta.table_name)  # the one it calls through (above)
    agents: list[str] = []

    def note(request, **_):
        agent = request.headers["User-Agent"]
        agents.append(agent.decode() if isinstance(agent, bytes) else agent)

    client.meta.events.register("before-send.dynamodb.GetItem", note)
    try:
        with pytest.raises(model.DoesNotExist):  # a real call, answered
            model.get(f"u{uid}#c1", f"nobody-{uid}@example.org")
    finally:
        client.meta.events.unregister("before-send.dynamodb.GetItem", note)
    # The fixed string (Powertools appends its own part to every boto3 client's); botocore's computed one
    # would start with the SDK's name and carry `ua/2.1`, `os/...`, `lang/python#...`.
    assert len(agents) == 1 and agents[0].startswith(aws.USER_AGENT) and "ua/2.1" not in agents[0]
