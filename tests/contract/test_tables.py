"""Bound pynamodb models use the platform's shared boto3 session (chalicelib.stores.tables)."""

import pytest

from chalicelib import wiring
from chalicelib.core import aws
from chalicelib.stores.ledger_model import LedgerModel
from chalicelib.stores.tables import bound


def _ledger_model() -> type[LedgerModel]:
    settings = wiring.container().settings
    return bound(LedgerModel, settings.resources.ledger_table.name, settings.region)


def test_a_bound_model_calls_dynamodb_through_the_shared_sessions_client(stack, uid):
    # A model bound here, on a name no other test binds: a stack started in this process since another test
    # bound the ledger (tests/local start their own) resets the shared clients, and a model bound before keeps
    # the client it was given then.
    model = bound(LedgerModel, f"moonsend-local-ledger-{uid}", wiring.container().settings.region)
    # pynamodb's own property hands out the client it was given, rather than making one of its own: if a
    # new pynamodb version kept its client elsewhere, this would fail and the session per model come back.
    assert model._get_connection().connection.client is aws.table_client(model.Meta.region, model.Meta.table_name)


def test_a_bound_models_requests_carry_the_fixed_user_agent(stack, uid):
    model = _ledger_model()
    client = model._get_connection().connection.client
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
