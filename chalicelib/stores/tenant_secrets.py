"""Each tenant's SES secret, encrypted with the stage's KMS key before it is stored (chalicelib.stores.tenants).

A secret (an AWS secret access key: 40 characters) is encrypted directly with KMS `Encrypt` (up to 4 KB
needs no data key), under an encryption context naming its tenant: KMS binds the ciphertext to it, so a
ciphertext copied into another tenant's row does not decrypt there (`SecretUnreadable`). The table then
holds no secret in the clear, and a role that may read the table (the jobs that track queue activity)
but may not use the key (infra/iam.py grants kms:Decrypt to precompile_email and send_emails only) learns
nothing from it, nor do the table's backups.

Decrypted secrets are kept in memory for the container's life, bounded: one Decrypt per tenant key
version per warm container, counted in `decrypts`.
"""

from __future__ import annotations

import base64
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.core import aws
from chalicelib.core.errors import SecretsKeyNotReady

# The encryption context's key: its value is the tenant's userId (IAM policies require it).
CONTEXT_KEY = "moonsend:tenant"
# Decrypted secrets kept per container (a secret and its ciphertext: about 300 bytes each).
CACHE_SIZE = 1024
# KMS's answers for a ciphertext that is not this tenant's or not ours: a retry gives the same answer.
# (AccessDenied is not one: a role without the grant is a deploy's mistake, and its email waits for the fix.)
_UNREADABLE = frozenset({"InvalidCiphertextException", "IncorrectKeyException"})


class SecretUnreadable(Exception):
    """A stored secret KMS will not decrypt for this tenant (another tenant's, or not ours)."""


class TenantSecrets:
    """Encrypt a tenant's secret for its row, and decrypt it (cached) for the functions allowed to."""

    def __init__(self, kms: Callable[[], Any], key_alias: str, cache_size: int = CACHE_SIZE) -> None:
        self._kms = kms  # made at first use: most functions that read tenants never encrypt or decrypt
        self._key = key_alias
        self._cache: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._size = cache_size
        self._lock = threading.Lock()
        self._opening: dict[tuple[str, str], threading.Lock] = {}  # one Decrypt per secret however many ask
        self.decrypts = 0  # KMS Decrypt calls this container made (the cost of the cache's misses)
        self.encrypts = 0

    @classmethod
    def of(cls, key_alias: str, region: str) -> TenantSecrets:
        """With the platform's own KMS client (the caller's role; an operator's credentials in the CLI)."""
        return cls(lambda: aws.client("kms", region), key_alias)

    def seal(self, user_id: str, secret: str) -> str:
        """The secret encrypted for `user_id`'s row (base64 of KMS's ciphertext blob)."""
        try:
            blob = self._kms().encrypt(KeyId=self._key, Plaintext=secret.encode(), EncryptionContext=_context(user_id))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "AccessDeniedException":
                raise  # throttled, unavailable: the invocation is retried as it is
            raise SecretsKeyNotReady(
                f"tenant {user_id}: KMS refused to encrypt its SES secret under {self._key} (AccessDeniedException): "
                "a new key's alias takes up to five minutes to authorize the functions' roles; retried by Lambda"
            ) from None
        sealed = base64.b64encode(blob["CiphertextBlob"]).decode()
        with self._lock:
            self.encrypts += 1
            self._remember((user_id, sealed), secret)
        return sealed

    def open(self, user_id: str, sealed: str) -> str:
        """The secret `sealed` holds, if it was sealed for `user_id`; SecretUnreadable otherwise.

        Threads asking for the same secret at once (a drain's first sends) wait for one Decrypt."""
        key = (user_id, sealed)
        hit = self._cached(key)
        if hit is not None:
            return hit
        with self._lock:
            opening = self._opening.setdefault(key, threading.Lock())
        with opening:
            hit = self._cached(key)
            if hit is not None:
                return hit
            try:
                return self._decrypt(user_id, sealed)
            finally:
                with self._lock:
                    self._opening.pop(key, None)

    def _cached(self, key: tuple[str, str]) -> str | None:
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
            return hit

    def _decrypt(self, user_id: str, sealed: str) -> str:
        try:
            blob = base64.b64decode(sealed, validate=True)
            answer = self._kms().decrypt(CiphertextBlob=blob, EncryptionContext=_context(user_id))
        except ValueError:
            raise SecretUnreadable(f"tenant {user_id}: its stored SES secret is not a ciphertext") from None
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _UNREADABLE:
                raise SecretUnreadable(
                    f"tenant {user_id}: KMS does not decrypt its stored SES secret for it "
                    f"({exc.response['Error']['Code']})"
                ) from None
            raise  # throttled, unavailable: the caller tries again later
        secret = answer["Plaintext"].decode()
        with self._lock:
            self.decrypts += 1
            self._remember((user_id, sealed), secret)
        return secret

    def _remember(self, key: tuple[str, str], secret: str) -> None:
        self._cache[key] = secret
        self._cache.move_to_end(key)
        while len(self._cache) > self._size:
            self._cache.popitem(last=False)


def _context(user_id: str) -> dict[str, str]:
    return {CONTEXT_KEY: user_id}
