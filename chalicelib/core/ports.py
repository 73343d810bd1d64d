"""The ports of the AWS clients the domain calls directly (S3's objects), as `typing.Protocol`.

Declared beside chalicelib.core.aws, which builds the real clients, as the stores' ports are beside the
stores (chalicelib.stores.ports says why). A boto3 client is typed `Any` and so satisfies any port; the
in-memory fakes (tests/fakes/s3.py) are checked against these by mypy where they are handed to a store.
"""

from __future__ import annotations

from typing import Any, Protocol


class S3Objects(Protocol):
    """The object calls of the payload store, the failed copies and the schedule store's bodies."""

    def put_object(self, *, Bucket: str, Key: str, Body: bytes, **params: Any) -> Any: ...

    def get_object(self, *, Bucket: str, Key: str) -> dict[str, Any]: ...

    def delete_object(self, *, Bucket: str, Key: str) -> Any: ...

    @property
    def exceptions(self) -> Any:
        """The client's modelled errors (`exceptions.NoSuchKey`: a failed copy that is not there)."""
