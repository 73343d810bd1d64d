"""The stores' ports: what the domain asks of each store, as a `typing.Protocol`, and the values they speak of.

One module per store, or per few stores that serve one concept (`ledger`, `tenants`, `campaigns`, `schedule`,
`queues`, `suppression`, `sending`, `events`, `console`); the SES sender's port is in chalicelib.send.ports and
the AWS clients' (S3, SQS) in chalicelib.core.ports.

Ports define what they speak of, as Powertools for AWS Lambda's idempotency port (`persistence/base.py`)
defines its `DataRecord`: a tenant, a claim, a stored batch are dataclasses here, and the stores import them
from here. So the dependency runs one way: a store depends on its port, never a port on a store; a port
module imports only chalicelib.core, chalicelib.stores.pauses (a pure module) and other ports, never
pynamodb, boto3 or a store's module, and tests/unit/test_layers.py holds it so.

One port per store where one serves. A consumer imports the port it needs from one known path; the concrete
store and the fake in tests/fakes both satisfy it structurally, and mypy checks both where they are handed to
a consumer (chalicelib.wiring for the store, tests/fakes/parts.py for the fake) and in tests/contract, which
also runs each port's behaviour against both. A store keeps several ports only where its consumers must not
share them: the ledger's writes are the recorder's alone (`LedgerRecords`), apart from its claims, the
pipeline's reads and a whole campaign's pages; the schedule store keeps email (intake and parking) apart
from releasing it; the lease's holders are read by jobs that never take one.
"""
