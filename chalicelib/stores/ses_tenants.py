"""SES tenants: each moonsend tenant that sends through the platform's SES account is an SES tenant of it.

On one SES account, one tenant's bounces could pause everyone's sending. SES tenants let SES pause only
the tenant that misbehaves. On a tenant's first send through the platform's account (the free plan),
SesTenants:
- creates the SES tenant `<app>-<stage>-<userId>` (a digest of the id where that would be too long);
- sets its reputation policy (`MOONSEND_SES_TENANT_POLICY`: standard by default, or strict, or none);
- associates with it the identity the email is sent from and the stage's configuration set.

Every email then goes out with its TenantName. What is known to be in place is remembered per container,
so a container pays two reads per tenant (GetTenant, ListTenantResources), and the creating calls only
once in the tenant's life.

`status` reads SES's view of a tenant (GetReputationEntity): whether it may send (the aggregate of SES's
and our own status) and, if not, SES's cause. It is read when SES refuses a send with
SendingPausedException, and by the reputation guard after each bounce or complaint. DISABLED pauses the
moonsend tenant with SES's reason: its email is parked, not failed, and `moonsend status` shows why.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

POLICIES = ("none", "standard", "strict")
MAX_TENANT_NAME = 64
STATUS_CACHE_S = 60.0
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True)
class TenantStatus:
    name: str
    sending: str  # ENABLED, REINSTATED or DISABLED (SES's aggregate)
    cause: str | None  # why, when it may not send
    policy: str | None  # the reputation policy's ARN

    @property
    def paused(self) -> bool:
        return self.sending == "DISABLED"

    @property
    def reason(self) -> str:
        """The moonsend tenant's pause reason when SES paused it."""
        return f"SES paused sending for SES tenant {self.name}: {self.cause or 'no cause given'}"


def tenant_name(prefix: str, user_id: str) -> str:
    """`moonsend-dev-acme`; a digest of the id where it would be longer than SES takes or not of its alphabet."""
    name = f"{prefix}-{user_id}"
    if len(name) <= MAX_TENANT_NAME and _NAME_RE.match(name):
        return name
    return f"{prefix}-{hashlib.sha256(user_id.encode()).hexdigest()[:32]}"[:MAX_TENANT_NAME]


def policy_arn(region: str, policy: str) -> str:
    return f"arn:aws:ses:{region}:aws:reputation-policy/{policy}"


class SesTenants:
    def __init__(
        self,
        client: Callable[[], Any],
        region: str,
        account_id: str,
        prefix: str,
        configuration_set: str | None,
        policy: str = "standard",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"SES tenant policy {policy!r}: one of {', '.join(POLICIES)}")
        self._client = client  # the platform's SES v2 client
        self._region = region
        self._account = account_id
        self._prefix = prefix
        self._configuration_set = configuration_set
        self._policy = policy
        self._clock = clock
        self._ready: dict[tuple[str, str], str] = {}  # (user, identity) -> tenant name
        self._arns: dict[str, str] = {}  # tenant name -> ARN
        self._statuses: dict[str, tuple[float, TenantStatus]] = {}
        self._lock = threading.Lock()
        self._guards: dict[str, threading.Lock] = {}

    def name_of(self, user_id: str) -> str:
        return tenant_name(self._prefix, user_id)

    def ensure(self, user_id: str, from_address: str) -> str:
        """The SES tenant to send this tenant's email from `from_address` with, in place."""
        key = (user_id, from_address.lower())
        with self._lock:
            name = self._ready.get(key)
            guard = self._guards.setdefault(user_id, threading.Lock())
        if name is not None:
            return name
        with guard:  # one set-up per tenant, however many send threads arrive at once
            with self._lock:
                name = self._ready.get(key)
            if name is not None:
                return name
            name = self.name_of(user_id)
            arn = self._tenant(name)
            wanted = [self._identity_arn(from_address)]
            if self._configuration_set:
                head = f"arn:aws:ses:{self._region}:{self._account}"
                wanted.append(f"{head}:configuration-set/{self._configuration_set}")
            self._associate(name, wanted)
            with self._lock:
                self._ready[key] = name
                self._arns[name] = arn
        return name

    def forget(self, user_id: str) -> None:
        """SES refused a send for a resource we took to be in place: the next send sets it up again."""
        with self._lock:
            for key in [k for k in self._ready if k[0] == user_id]:
                del self._ready[key]

    def status(self, user_id: str, *, fresh: bool = False) -> TenantStatus | None:
        """SES's view of the tenant (None: it is not an SES tenant yet). Cached for a minute."""
        name = self.name_of(user_id)
        now = self._clock()
        with self._lock:
            hit = self._statuses.get(name)
        if hit and not fresh and now - hit[0] < STATUS_CACHE_S:
            return hit[1]
        arn = self._arns.get(name)
        c = self._client()
        if arn is None:
            try:
                arn = str(c.get_tenant(TenantName=name)["Tenant"]["TenantArn"])
            except ClientError as exc:
                if _code(exc) == "NotFoundException":
                    return None
                raise
        entity = c.get_reputation_entity(ReputationEntityType="RESOURCE", ReputationEntityReference=arn)[
            "ReputationEntity"
        ]
        sending = str(entity.get("SendingStatusAggregate") or "ENABLED")
        causes = [
            (entity.get(k) or {}).get("Cause")
            for k in ("AwsSesManagedStatus", "CustomerManagedStatus")
            if (entity.get(k) or {}).get("Status") == "DISABLED"
        ]
        status = TenantStatus(
            name, sending, next((c for c in causes if c), None), entity.get("ReputationManagementPolicy")
        )
        with self._lock:
            self._statuses[name] = (now, status)
            self._arns[name] = arn
        return status

    def _tenant(self, name: str) -> str:
        """The tenant's ARN, creating it (with the stage's policy) if it is not there."""
        c = self._client()
        try:
            return str(c.get_tenant(TenantName=name)["Tenant"]["TenantArn"])
        except ClientError as exc:
            if _code(exc) != "NotFoundException":
                raise
        try:
            arn = str(c.create_tenant(TenantName=name)["TenantArn"])
        except ClientError as exc:
            if _code(exc) != "AlreadyExistsException":  # another container created it a moment ago
                raise
            return str(c.get_tenant(TenantName=name)["Tenant"]["TenantArn"])
        # SES gives a new tenant the standard policy; another is set here (and only on creation: an
        # operator's later choice for one tenant is kept).
        if self._policy != "standard":
            c.update_reputation_entity_policy(
                ReputationEntityType="RESOURCE",
                ReputationEntityReference=arn,
                ReputationEntityPolicy=policy_arn(self._region, self._policy),
            )
        return arn

    def _associate(self, name: str, wanted: list[str]) -> None:
        c = self._client()
        have: set[str] = set()
        kwargs: dict[str, Any] = {"TenantName": name}
        while True:
            page = c.list_tenant_resources(**kwargs)
            have |= {str(r["ResourceArn"]) for r in page.get("TenantResources", [])}
            if not page.get("NextToken"):
                break
            kwargs["NextToken"] = page["NextToken"]
        for arn in wanted:
            if arn in have:
                continue
            try:
                c.create_tenant_resource_association(TenantName=name, ResourceArn=arn)
            except ClientError as exc:
                if _code(exc) != "AlreadyExistsException":
                    raise

    def _identity_arn(self, from_address: str) -> str:
        """The identity SES sends this address from: the address's own if it is verified, else its domain's."""
        head = f"arn:aws:ses:{self._region}:{self._account}:identity"
        address = from_address.lower()
        try:
            self._client().get_email_identity(EmailIdentity=address)
            return f"{head}/{address}"
        except ClientError as exc:
            if _code(exc) != "NotFoundException":
                raise
        return f"{head}/{address.rpartition('@')[2]}"


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))
