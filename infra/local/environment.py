"""Emulator: each function sees only its own environment, as on Lambda, though all share this process.

On AWS a function's environment is the template's variables for that function plus what Lambda sets
(its name, region, memory): a variable the template gives one function and not another is missing there,
and code that reads it falls back to a default that may be wrong on AWS (digest emails once linked to
`http://127.0.0.1:8000` because run_digest was never given `MOONSEND_API_URL`). One process has one
`os.environ`, so without this every function saw every variable of every other, and the defect could not
show up in a test.

`install()` replaces `os.environ` with a view that, inside an invocation (`acting_in`), reads and writes
the invoking function's own mapping, and elsewhere (the stack itself, tests, the operator's commands) the
process's real environment. Threads a handler starts through a pool carry the invocation's context
(infra.local.identity.carry_into_pools), and so its environment. Subprocesses inherit the process's real
environment, as they do without this.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any

# What Lambda itself puts in every function's environment (and the local endpoint, which every AWS call of
# a function goes to here): taken from the process, the rest of its MOONSEND_ and AWS_ variables left out.
LAMBDA_SET = ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL")

_current: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("moonsend_env", default=None)


class _FunctionEnviron(MutableMapping[str, str]):
    """`os.environ` as the calling invocation sees it (the real one outside any invocation)."""

    def __init__(self, real: MutableMapping[str, str]) -> None:
        self.real = real

    def _mapping(self) -> MutableMapping[str, str]:
        own = _current.get()
        return self.real if own is None else own

    def __getitem__(self, key: str) -> str:
        return self._mapping()[key]

    def __setitem__(self, key: str, value: str) -> None:
        self._mapping()[key] = value

    def __delitem__(self, key: str) -> None:
        del self._mapping()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._mapping()))

    def __len__(self) -> int:
        return len(self._mapping())

    def copy(self) -> dict[str, str]:
        return dict(self._mapping())

    def __repr__(self) -> str:
        return f"FunctionEnviron({'function' if _current.get() is not None else 'process'})"


def function_environment(
    process: Mapping[str, str], template: Mapping[str, str], lambda_set: Mapping[str, str]
) -> dict[str, str]:
    """A function's environment: the process's own variables that are no setting of ours or of AWS's (PATH,
    HOME, ...), what Lambda sets, and the template's variables for that function."""
    base = {k: v for k, v in process.items() if not k.startswith(("MOONSEND_", "AWS_"))}
    return {**base, **lambda_set, **template}


@contextlib.contextmanager
def acting_in(environment: dict[str, str] | None) -> Iterator[None]:
    """Reads of `os.environ` in this block (and in threads it starts through a pool) see `environment`."""
    token = _current.set(environment)
    try:
        yield
    finally:
        _current.reset(token)


def install() -> Callable[[], None]:
    """Put the per-invocation view in place of `os.environ`; returns undo."""
    real = os.environ
    if isinstance(real, _FunctionEnviron):
        return lambda: None
    # A new object in the os module's place (not a change of the process's environment): os.getenv and
    # every `os.environ[...]` read it from there at each call.
    setattr(os, "environ", _FunctionEnviron(real))  # noqa: B010

    def undo() -> None:
        setattr(os, "environ", real)  # noqa: B010

    return undo


def current() -> dict[str, Any] | None:
    return _current.get()
