"""Emulator: each function's AWS calls signed with its own role's credentials, as Lambda gives them.

On AWS every function runs in its own environment, whose credentials are its execution role's. Here
all functions share one process and one set of boto3 clients (chalicelib.core.aws), so the credentials are
chosen per call instead: the runtime marks the invocation's thread with the role credentials STS gave
that function (`acting_as`), threads the handler starts carry the mark on (`carry_into_pools`), and a
credential provider first in botocore's chain (`install`, for every session of this process: boto3's
and pynamodb's alike) signs each request with the credentials of the thread that makes it. Threads that
are no invocation (the stack itself, the operator's CLI, tests) sign with the operator's keys, as an
operator's own calls on AWS would; clients made with explicit keys (a tenant's SES account) keep them.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import botocore.credentials
from botocore.credentials import CredentialProvider, Credentials, ReadOnlyCredentials


@dataclass(frozen=True)
class RoleCredentials:
    """Temporary credentials of one function's role (from STS AssumeRole on the local endpoint)."""

    function_name: str
    role_arn: str
    access_key: str
    secret_key: str
    token: str


_acting: contextvars.ContextVar[RoleCredentials | None] = contextvars.ContextVar("moonsend_role", default=None)


@contextlib.contextmanager
def acting_as(role: RoleCredentials | None) -> Iterator[None]:
    """Calls made in this block (and in threads it starts through a pool) are signed as `role`."""
    token = _acting.set(role)
    try:
        yield
    finally:
        _acting.reset(token)


def current() -> RoleCredentials | None:
    return _acting.get()


class _PerCallCredentials(Credentials):
    """Credentials botocore reads at every signing: the calling thread's role, else the operator's."""

    def __init__(self, operator: ReadOnlyCredentials) -> None:
        super().__init__(operator.access_key, operator.secret_key, operator.token, method="moonsend-local")
        self._operator = operator

    def get_frozen_credentials(self) -> ReadOnlyCredentials:
        role = _acting.get()
        if role is None:
            return self._operator
        return ReadOnlyCredentials(role.access_key, role.secret_key, role.token)


class _Provider(CredentialProvider):
    METHOD = "moonsend-local"
    CANONICAL_NAME = "moonsend-local"

    def __init__(self, operator: ReadOnlyCredentials) -> None:
        super().__init__()
        self._operator = operator

    def load(self) -> Credentials:
        return _PerCallCredentials(self._operator)


def install(operator_key: str, operator_secret: str) -> Callable[[], None]:
    """Put the per-call provider first in the credential chain of every botocore session made from now
    on (made before, a session keeps the chain it had); returns undo."""
    operator = ReadOnlyCredentials(operator_key, operator_secret, None)
    real = botocore.credentials.create_credential_resolver

    def create(session: Any, *args: Any, **kwargs: Any) -> Any:
        resolver = real(session, *args, **kwargs)
        resolver.insert_before("env", _Provider(operator))
        return resolver

    botocore.credentials.create_credential_resolver = create

    def undo() -> None:
        botocore.credentials.create_credential_resolver = real

    return undo


def carry_into_pools() -> Callable[[], None]:
    """Make tasks submitted to any thread pool run in the submitter's context (its role); returns undo.

    A handler's own pools (the drainer's send threads, the ledger's writers) make AWS calls for the
    invocation that started them; Python's pools do not carry context variables over by themselves."""
    real_submit = ThreadPoolExecutor.submit

    def submit(self: ThreadPoolExecutor, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        if _acting.get() is None:
            return real_submit(self, fn, *args, **kwargs)
        return real_submit(self, contextvars.copy_context().run, fn, *args, **kwargs)

    ThreadPoolExecutor.submit = submit  # type: ignore[method-assign]

    def undo() -> None:
        ThreadPoolExecutor.submit = real_submit  # type: ignore[method-assign]

    return undo
