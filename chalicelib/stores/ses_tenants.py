"""SES tenants: each moonsend tenant that sends through the platform's SES account is an SES tenant of it.

On one SES account, one tenant's bounces could pause everyone's sending. SES tenants let SES pause only
the tenant that misbehaves. On a tenant's first send through the platform's account (the free plan),
SesTenants:
- creates the SES tenant `<app>-<stage>-<userId>` (a digest of the id where that would be too long);
- sets its reputation policy (`MOONSEND_SES_TENANT_POLICY`: standard by default, or strict, or none);
- associates with it the identity the email is sent from and the stage's configuration set.

Every email then goes out with its TenantName. SES tenants are regional: a tenant whose free-plan email
goes out in another region than the stage's has its SES tenant there. What is known to be in place is
remembered per container, so a container pays three reads per tenant and region (GetTenant,
GetEmailIdentity, ListTenantResources), and the creating calls are made once in the tenant's life.

`status` reads SES's view of a tenant (GetReputationEntity): whether it may send (the aggregate of SES's
and our own status) and, if not, SES's cause. It is read when SES refuses a send with
SendingPausedException, and by the reputation guard after each bounce or complaint, one read at a time
per tenant. DISABLED pauses the moonsend tenant with SES's reason: its email is parked, not failed, and
`moonsend status` shows why.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.stores.ports.sending import TenantStatus

POLICIES = ("none", "standard", "strict")
MAX_TENANT_NAME = 64
STATUS_CACHE_S = 60.0
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]+\Z")


def tenant_name(prefix: str, user_id: str) -> str:
    """`moonsend-dev-acme`. An id that would make a name longer than SES takes, or not of its alphabet, is
    named by its digest after `_`, which no id starts with, so that a digest never names another id's."""
    name = f"{prefix}-{user_id}"
    if len(name) <= MAX_TENANT_NAME and _NAME_RE.match(name) and not user_id.startswith("_"):
        return name
    return f"{prefix}-_{hashlib.sha256(user_id.encode()).hexdigest()}"[:MAX_TENANT_NAME]


def policy_arn(region: str, policy: str) -> str:
    return f"arn:aws:ses:{region}:aws:reputation-policy/{policy}"


class SesTenants:
    def __init__(
        self,
        client: Callable[[str], Any],
        account_id: str,
        prefix: str,
        configuration_set: str | None,
        policy: str = "standard",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"SES tenant policy {policy!r}: one of {', '.join(POLICIES)}")
        self._client = client  # the platform's SES v2 client in a region
        self._account = account_id
        self._prefix = prefix
        self._configuration_set = configuration_set
        self._policy = policy
        self._clock = clock
        self._ready: dict[tuple[str, str, str], str] = {}  # (region, user, from address) -> tenant name
        self._arns: dict[tuple[str, str], str] = {}  # (region, tenant name) -> its ARN
        self._statuses: dict[tuple[str, str], tuple[float, TenantStatus]] = {}
        self._lock = threading.Lock()
        self._guards: dict[tuple[str, str], threading.Lock] = {}

    def name_of(self, user_id: str) -> str:
        return tenant_name(self._prefix, user_id)

    def ensure(self, user_id: str, from_address: str, region: str) -> str:
        """The SES tenant to send this tenant's email from `from_address` in `region` with, in place."""
        key = (region, user_id, from_address.lower())
        name = self.name_of(user_id)
        with self._lock:
            ready = self._ready.get(key)
            guard = self._guards.setdefault((region, name), threading.Lock())
        if ready is not None:
            return ready
        with guard:  # one set-up per tenant, however many send threads arrive at once
            with self._lock:
                ready = self._ready.get(key)
            if ready is not None:
                return ready
            arn = self._tenant(name, region)
            wanted = [self._identity_arn(from_address, region)]
            if self._configuration_set:
                wanted.append(f"arn:aws:ses:{region}:{self._account}:configuration-set/{self._configuration_set}")
            self._associate(name, wanted, region)
            with self._lock:
                self._ready[key] = name
                self._arns[(region, name)] = arn
        return name

    def forget(self, user_id: str) -> None:
        """SES refused a send for a resource we took to be in place: the next send sets it up again."""
        with self._lock:
            for key in [k for k in self._ready if k[1] == user_id]:
                del self._ready[key]

    def status(self, user_id: str, region: str, *, max_age_s: float = STATUS_CACHE_S) -> TenantStatus | None:
        """SES's view of the tenant in `region` (None: it is not an SES tenant there), at most `max_age_s`
        old. One read at a time per tenant: the send threads that meet a pause together share it."""
        name = self.name_of(user_id)
        with self._lock:
            guard = self._guards.setdefault((region, name), threading.Lock())
        with guard:
            with self._lock:
                hit = self._statuses.get((region, name))
            if hit and self._clock() - hit[0] < max_age_s:
                return hit[1]
            status = self._read_status(name, region)
            if status is not None:
                with self._lock:
                    self._statuses[(region, name)] = (self._clock(), status)
            return status

    def _read_status(self, name: str, region: str) -> TenantStatus | None:
        c = self._client(region)
        arn = self._arns.get((region, name))
        if arn is None:
            try:
                arn = str(c.get_tenant(TenantName=name)["Tenant"]["TenantArn"])
            except ClientError as exc:
                if _code(exc) == "NotFoundException":
                    return None
                raise
            with self._lock:
                self._arns[(region, name)] = arn
        entity = c.get_reputation_entity(ReputationEntityType="RESOURCE", ReputationEntityReference=arn)
        entity = entity["ReputationEntity"]
        causes = [
            (entity.get(k) or {}).get("Cause")
            for k in ("AwsSesManagedStatus", "CustomerManagedStatus")
            if (entity.get(k) or {}).get("Status") == "DISABLED"
        ]
        cause = next((text for text in causes if text), None)
        sending = str(entity.get("SendingStatusAggregate") or "ENABLED")
        return TenantStatus(name, sending, cause, entity.get("ReputationManagementPolicy"))

    def _tenant(self, name: str, region: str) -> str:
        """The tenant's ARN, creating it (with the stage's policy) if it is not there."""
        c = self._client(region)
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
                ReputationEntityPolicy=policy_arn(region, self._policy),
            )
        return arn

    def _associate(self, name: str, wanted: list[str], region: str) -> None:
        c = self._client(region)
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

    def _identity_arn(self, from_address: str, region: str) -> str:
        """The identity SES sends this address from: the address's own if it is verified for sending, else
        its domain's (SES uses the domain's when the address's is pending or failed)."""
        head = f"arn:aws:ses:{region}:{self._account}:identity"
        address = from_address.lower()
        try:
            found = self._client(region).get_email_identity(EmailIdentity=address)
            # GetEmailIdentity says it in two fields (VerifiedForSendingStatus, VerificationStatus): either will do.
            if found.get("VerifiedForSendingStatus") or found.get("VerificationStatus") == "SUCCESS":
                return f"{head}/{address}"
        except ClientError as exc:
            if _code(exc) != "NotFoundException":
                raise
        return f"{head}/{address.rpartition('@')[2]}"


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))
