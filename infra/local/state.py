"""Emulator: the stack's state across a restart: saved by a clean stop, loaded by the next `moonsend up`.

What is kept is what AWS would still hold after our process went away:
- moto's data: DynamoDB tables and their items (ledger, tenants, counters, schedule store...), SQS queues
  with every message in the state it was in (visible, in flight until its visibility timeout, delayed),
  S3 objects, CloudWatch alarms, SES identities, EventBridge Scheduler's schedules (a digest's);
- moto's KMS keys: the data stack's key of the tenants' SES secrets (the tenants' rows hold its ciphertexts);
- the SES stand-in's accounts (limits, the last day's sends, keys added to an account, event destinations);
- the asynchronous events Lambda had accepted and not run: SNS deliveries, SES events, drains handing on.

What each start makes again from the packaged template: the stack, its functions, roles, policies,
topics, subscriptions and schedules, so a code change between two runs is picked up with the data kept.

A stop for a save first lets every running invocation finish: their Lambda time is up at once, so each
drain records what it sent and hands on (the hand-on is deferred with the other events). Timestamps in the
data are wall-clock (epoch) times, so visibility timeouts, claims and leases run on across the restart.

The file is a pickle of moto's objects, read back only from the outbox's own `.state` folder, which
`moonsend up` creates; it is tied to the moto version that wrote it (another version: start `--fresh`).
"""

from __future__ import annotations

import os
import pickle
import threading
import time
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

FORMAT = 1
# moto's services whose data is kept; the others are made again from the template at each start.
SERVICES = ("dynamodb", "sqs", "s3", "cloudwatch", "ses", "sesv2", "scheduler", "kms")
STATE_FILE = "stack.pickle"

_LOCK_TYPE = type(threading.Lock())
_RLOCK_TYPE = type(threading.RLock())
# The private keys moto's KMS makes for each key (RSA and elliptic-curve, by the key's spec).
_PRIVATE_KEY_TYPES = (rsa.RSAPrivateKey, ec.EllipticCurvePrivateKey, ed25519.Ed25519PrivateKey)


class StateUnusable(Exception):
    """The saved state cannot be loaded into this stack; the message says why and what to do."""


RUN_MARK = "running"  # beside the state while a `moonsend up` runs; removed by its clean stop


@dataclass(frozen=True)
class PreviousRun:
    """The mark of a `moonsend up` that wrote to this outbox and has not stopped cleanly."""

    pid: int
    started_at: float
    alive: bool  # still running (another stack on the same outbox), or died without its stop

    def explain(self, outbox: Path) -> str:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started_at))
        if self.alive:
            return f"another moonsend up (pid {self.pid}, started {started}) is running on {outbox}"
        return (
            f"the moonsend up started {started} (pid {self.pid}) on {outbox} ended without a clean stop (killed, "
            "or the machine went down): what it held in memory since its start is gone, the ledger of what it sent "
            "too, while its emails are in the outbox. Publishing its campaigns again would mail those recipients "
            "twice. `moonsend up --fresh` starts empty, knowing that; a clean stop (Ctrl-C, SIGTERM) saves the state"
        )


def previous_run(outbox: Path) -> PreviousRun | None:
    """The mark another `moonsend up` left on this outbox, if any."""
    path = outbox / ".state" / RUN_MARK
    try:
        pid_text, _, started = path.read_text().partition(" ")
        pid, started_at = int(pid_text), float(started)
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
        alive = pid != os.getpid()
    except ProcessLookupError:
        alive = False
    except PermissionError:  # another user's process has that pid now: not the stack that wrote the mark
        alive = False
    return PreviousRun(pid, started_at, alive)


def mark_running(outbox: Path) -> None:
    """This process runs a stack on the outbox until `unmark_running`: a kill leaves the mark for the next start."""
    folder = outbox / ".state"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    (folder / RUN_MARK).write_text(f"{os.getpid()} {time.time()}")


def unmark_running(outbox: Path) -> None:
    (outbox / ".state" / RUN_MARK).unlink(missing_ok=True)


def state_path(outbox: Path) -> Path:
    """Where the state of the stack writing to `outbox` lives (beside its emails)."""
    return outbox / ".state" / STATE_FILE


@dataclass
class SavedState:
    backends: dict[str, dict[str, dict[str, Any]]]  # service -> account -> region -> moto's backend
    ses: dict[str, Any]
    deferred: list[tuple[str, dict[str, Any]]]  # (function name, event) of the events not yet run
    fast_sqs: bool
    moto_version: str = field(default_factory=lambda: version("moto"))
    saved_at: float = field(default_factory=time.time)
    format: int = FORMAT

    def __setstate__(self, saved: dict[str, Any]) -> None:
        # A state saved before the events not yet run were called deferred names them by the old word: read
        # it as it was written (the file's FORMAT did not change).
        if "parked" in saved:
            saved["deferred"] = saved.pop("parked")
        self.__dict__.update(saved)

    def summary(self) -> str:
        queues = [
            q for regions in self.backends.get("sqs", {}).values() for b in regions.values() for q in b.queues.values()
        ]
        messages = sum(int(q.approximate_number_of_messages) for q in queues)
        inflight = sum(int(q.approximate_number_of_messages_not_visible) for q in queues)
        items = sum(
            sum(1 for _ in t.all_items())
            for regions in self.backends.get("dynamodb", {}).values()
            for b in regions.values()
            for t in b.tables.values()
        )
        saved = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.saved_at))
        return (
            f"saved {saved}: {len(queues)} queues holding {messages} messages ({inflight} in flight), "
            f"{items} table items, {len(self.deferred)} events to run"
        )


def _private_key(pem: bytes) -> Any:
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    return load_pem_private_key(pem, password=None)


class _Pickler(pickle.Pickler):
    """moto's models hold locks and conditions (an SQS queue's receive wait): kept as new, unlocked ones. Its
    KMS keys hold a `cryptography` private key, which does not pickle: kept as its PEM."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, threading.Condition):
            return threading.Condition, ()
        if type(obj) is _LOCK_TYPE:
            return threading.Lock, ()
        if type(obj) is _RLOCK_TYPE:
            return threading.RLock, ()
        if isinstance(obj, _PRIVATE_KEY_TYPES):
            from cryptography.hazmat.primitives import serialization

            pem = obj.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
            return _private_key, (pem,)
        return NotImplemented


def capture(ses: dict[str, Any], deferred: list[tuple[str, dict[str, Any]]], fast_sqs: bool) -> SavedState:
    from moto.backends import get_backend

    backends: dict[str, dict[str, dict[str, Any]]] = {}
    for service in SERVICES:
        accounts = get_backend(service)  # type: ignore[call-overload]
        backends[service] = {a: dict(accounts[a].items()) for a in list(accounts.keys())}
    return SavedState(backends, ses, list(deferred), fast_sqs)


def save(path: Path, state: SavedState) -> None:
    """Write atomically (a crash while saving leaves the previous state), readable by this user only: it
    holds tenants' SES keys, and whoever can write it runs code in the next stack."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        _Pickler(f, protocol=pickle.HIGHEST_PROTOCOL).dump(state)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _check_owner(path: Path) -> None:
    """Load only a file this user wrote, in a folder nobody else can write to (a pickle runs code)."""
    for p in (path.parent, path):
        st = p.stat()
        if st.st_uid != os.getuid() or st.st_mode & 0o022:
            raise StateUnusable(f"{p} is not this user's own or others may write to it: not loaded")


def load(path: Path, fast_sqs: bool) -> SavedState:
    _check_owner(path)
    try:
        with path.open("rb") as f:
            state = pickle.load(f)
    except Exception as exc:
        raise StateUnusable(f"{path} cannot be read ({type(exc).__name__}: {exc})") from None
    if not isinstance(state, SavedState) or state.format != FORMAT:
        raise StateUnusable(f"{path} was written by another version of moonsend")
    if state.moto_version != version("moto"):
        raise StateUnusable(f"{path} was written with moto {state.moto_version}, this is moto {version('moto')}")
    if state.fast_sqs != fast_sqs:
        raise StateUnusable(f"{path} was written by a stack {'with' if state.fast_sqs else 'without'} --stock-sqs")
    return state


def restore(state: SavedState) -> None:
    """Put the saved data into moto's live backends (after the stack was made again from the template).

    A table is the saved one (with its items) only where its definition is still the template's; a table
    the template changed refuses the load rather than run the new code on data of another shape."""
    from moto.backends import get_backend

    for service, accounts in state.backends.items():
        live_accounts = get_backend(service)  # type: ignore[call-overload]
        for account, regions in accounts.items():
            for region, saved in regions.items():
                live = live_accounts[account][region]
                if service == "dynamodb":
                    _restore_tables(live, saved)
                elif service == "kms":
                    _restore_keys(live, saved)
                else:
                    _merge(live, saved)


def _merge(live: Any, saved: Any) -> None:
    """Saved resources over the live backend's: collections merged (what the template made since, such as
    a new queue, stays; a saved resource of the same name wins, with its data), everything else saved."""
    for name, value in saved.__dict__.items():
        current = live.__dict__.get(name)
        if isinstance(value, dict) and isinstance(current, dict):
            current.update(value)
        else:
            live.__dict__[name] = value


def _restore_keys(live: Any, saved: Any) -> None:
    """The saved KMS keys. A key this start made again under an alias a saved key has (the data stack's key
    of the tenants' secrets) is dropped: the alias goes on naming the key the tenants' rows were encrypted
    with, and the stack's key is the same key across a restart, as the data stack's key is on AWS."""
    kept = {alias for key in saved.keys.values() for alias in key.aliases}
    for key_id, key in list(live.keys.items()):
        if kept & set(key.aliases):
            del live.keys[key_id]
    _merge(live, saved)


def _restore_tables(live: Any, saved: Any) -> None:
    for name, table in saved.tables.items():
        current = live.tables.get(name)
        if current is not None and _shape(current) != _shape(table):
            raise StateUnusable(f"table {name} is defined differently in the template now than in the saved state")
    live.tables.update(saved.tables)


def _shape(table: Any) -> tuple[Any, ...]:
    def index(i: Any) -> tuple[str, str]:
        return (str(i.name), repr(i.schema))

    return (
        repr(table.schema),
        sorted(index(i) for i in table.global_indexes),
        sorted(index(i) for i in table.indexes),
        repr(table.ttl.get("AttributeName")),
    )
