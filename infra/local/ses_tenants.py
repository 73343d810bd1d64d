"""Emulator: SES tenants in the local SES stand-in: moto implements none of them.

The calls moonsend makes, with the request and response shapes of the SES v2 API reference and boto3's
service model (the tests check them through botocore's own parser): CreateTenant, GetTenant,
CreateTenantResourceAssociation, ListTenantResources, GetReputationEntity, UpdateReputationEntityPolicy,
UpdateReputationEntityCustomerManagedStatus. A send that names a tenant (`TenantName`) is checked as SES
checks it: the tenant exists, the identity and configuration set it uses are associated with it, and its
sending is not paused (SendingPausedException).

Reputation policies act as SES documents them, on the stand-in's own findings: each tenant's sends and
bounces (to SES's mailbox simulator) are counted, and over POLICY_MIN_SENDS sends a bounce rate above
HIGH_BOUNCE_RATE is a high-impact finding (above LOW_BOUNCE_RATE a low-impact one). `standard` pauses the
tenant on a high-impact finding, `strict` on any, `none` never; the pause is SES-managed
(`AwsSesManagedStatus` DISABLED, with the finding as its cause), and a customer-managed status of
REINSTATED does not lift it, as SES documents. `enable()` lifts it, as SES would once the finding closes.

Each change of a tenant's SES-managed or customer-managed status is put on the local event bus
(infra.local.event_bus) as SES puts it on EventBridge's default bus: `Sending Status Disabled` or `Sending
Status Enabled`, the tenant's ARN in `resources`, `detail.data` the origin and the new record, in the shape of
the example in SES's Developer Guide (Tenants, "Setting up EventBridge notifications"). SES documents no
`Enabled` example: it is the same shape with the enabled record (an assumption, docs/operations.md).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote

POLICIES = ("none", "standard", "strict")
AWS_MANAGED, CUSTOMER_MANAGED = "AWS_MANAGED", "CUSTOMER_MANAGED"
POLICY_MIN_SENDS = 20
HIGH_BOUNCE_RATE = 0.10
LOW_BOUNCE_RATE = 0.05


@dataclass
class Status:
    status: str = "ENABLED"
    cause: str | None = None
    at: float = field(default_factory=time.time)

    def shape(self) -> dict[str, Any]:
        out: dict[str, Any] = {"Status": self.status, "LastUpdatedTimestamp": self.at}
        if self.cause:
            out["Cause"] = self.cause
        return out


@dataclass
class Tenant:
    name: str
    id: str
    arn: str
    created: float
    policy: str  # the policy's ARN
    resources: dict[str, str] = field(default_factory=dict)  # ARN -> IDENTITY | CONFIGURATION_SET
    customer: Status = field(default_factory=Status)
    aws: Status = field(default_factory=Status)
    sends: int = 0
    bounces: int = 0

    @property
    def sending(self) -> str:
        if "DISABLED" in (self.aws.status, self.customer.status):
            return "DISABLED"
        return "REINSTATED" if self.customer.status == "REINSTATED" else "ENABLED"

    def shape(self) -> dict[str, Any]:
        return {
            "TenantName": self.name,
            "TenantId": self.id,
            "TenantArn": self.arn,
            "CreatedTimestamp": self.created,
            "SendingStatus": self.sending,
            "Tags": [],
        }


class Answer(Exception):
    """An error answer, in SES v2's REST-JSON shape."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def policy_arn(region: str, name: str) -> str:
    return f"arn:aws:ses:{region}:aws:reputation-policy/{name}"


class SesTenants:
    """Every account's tenants (by account id), behind the stand-in's endpoint."""

    def __init__(self, region: str) -> None:
        self._region = region
        self._tenants: dict[tuple[str, str], Tenant] = {}  # (account, name)
        self._lock = threading.Lock()
        # (event source, detail-type, resources, detail, account) -> None: the stack's event bus, when set
        self.put_event: Callable[[str, str, list[str], dict[str, Any], str], None] | None = None
        self._events: list[tuple[str, str, list[str], dict[str, Any], str]] = []  # to put once the lock is let go

    def __getstate__(self) -> dict[str, Any]:
        """Kept across a restart (infra.local.state) without the bus: the restarted stack puts its own."""
        state = dict(self.__dict__)
        state.update(put_event=None, _events=[])
        return state

    # --- the API ---------------------------------------------------------------------------------
    def handle(self, account: str, method: str, path: str, body: bytes) -> tuple[int, dict[str, str], bytes] | None:
        """The answer to a tenant call, or None if the request is not one."""
        route = _route(method, path)
        if route is None:
            return None
        op, arn = route
        try:
            params = json.loads(body) if body else {}
            if not isinstance(params, dict):
                raise Answer(400, "BadRequestException", "the body must be a JSON object")
            with self._lock:
                answer = getattr(self, f"_{op}")(account, params, arn)
        except Answer as a:
            self._put_events()
            return a.status, _headers(a.code), json.dumps({"message": a.message}).encode()
        except ValueError:
            return 400, _headers("BadRequestException"), b'{"message": "the body is not JSON"}'
        self._put_events()
        return 200, _headers(None), json.dumps(answer, default=_json_time).encode()

    def _create_tenant(self, account: str, p: dict[str, Any], _arn: str | None) -> dict[str, Any]:
        name = _required(p, "TenantName")
        if (account, name) in self._tenants:
            raise Answer(400, "AlreadyExistsException", f"Tenant {name} already exists.")
        tenant_id = "tn-" + uuid.uuid4().hex[:29]
        arn = f"arn:aws:ses:{self._region}:{account}:tenant/{name}/{tenant_id}"
        # SES gives a new tenant the standard policy.
        t = Tenant(name, tenant_id, arn, time.time(), policy_arn(self._region, "standard"))
        self._tenants[(account, name)] = t
        return {**t.shape(), "Tags": p.get("Tags", [])}

    def _get_tenant(self, account: str, p: dict[str, Any], _arn: str | None) -> dict[str, Any]:
        return {"Tenant": self._tenant(account, _required(p, "TenantName")).shape()}

    def _associate(self, account: str, p: dict[str, Any], _arn: str | None) -> dict[str, Any]:
        t = self._tenant(account, _required(p, "TenantName"))
        resource = _required(p, "ResourceArn")
        kind = _resource_type(resource)
        if resource in t.resources:
            raise Answer(400, "AlreadyExistsException", f"Resource {resource} is already associated with {t.name}.")
        t.resources[resource] = kind
        return {}

    def _list_resources(self, account: str, p: dict[str, Any], _arn: str | None) -> dict[str, Any]:
        t = self._tenant(account, _required(p, "TenantName"))
        listed = [{"ResourceType": kind, "ResourceArn": arn} for arn, kind in sorted(t.resources.items())]
        return {"TenantResources": listed}

    def _get_entity(self, account: str, _p: dict[str, Any], arn: str | None) -> dict[str, Any]:
        t = self._by_arn(account, arn)
        entity = {
            "ReputationEntityReference": t.arn,
            "ReputationEntityType": "RESOURCE",
            "ReputationManagementPolicy": t.policy,
            "CustomerManagedStatus": t.customer.shape(),
            "AwsSesManagedStatus": t.aws.shape(),
            "SendingStatusAggregate": t.sending,
        }
        if self._finding(t):
            entity["ReputationImpact"] = self._finding(t)
        return {"ReputationEntity": entity}

    def _put_policy(self, account: str, p: dict[str, Any], arn: str | None) -> dict[str, Any]:
        t = self._by_arn(account, arn)
        policy = _required(p, "ReputationEntityPolicy")
        if policy not in {policy_arn(self._region, n) for n in POLICIES}:
            raise Answer(400, "BadRequestException", f"Unknown reputation policy {policy}.")
        t.policy = policy
        self._apply(t)
        return {}

    def _put_customer_status(self, account: str, p: dict[str, Any], arn: str | None) -> dict[str, Any]:
        t = self._by_arn(account, arn)
        status = _required(p, "SendingStatus")
        if status not in ("ENABLED", "REINSTATED", "DISABLED"):
            raise Answer(400, "BadRequestException", f"Invalid SendingStatus {status}.")
        was = t.customer.status
        t.customer = Status(status, "Status manually updated.")
        if status != was:
            self._changed(t, CUSTOMER_MANAGED, t.customer)
        return {}

    # --- sends -----------------------------------------------------------------------------------
    def check_send(self, account: str, name: str, identity_arns: list[str], configuration_set_arn: str | None) -> None:
        """Raise the Answer SES gives a send through this tenant that may not go."""
        with self._lock:
            t = self._tenants.get((account, name))
            if t is None:
                raise Answer(404, "NotFoundException", f"Tenant {name} does not exist.")
            if not any(arn in t.resources for arn in identity_arns):
                raise Answer(400, "BadRequestException", f"The identity is not associated with tenant {name}.")
            if configuration_set_arn and configuration_set_arn not in t.resources:
                raise Answer(400, "BadRequestException", f"The configuration set is not associated with tenant {name}.")
            if t.sending == "DISABLED":
                cause = t.aws.cause if t.aws.status == "DISABLED" else t.customer.cause
                raise Answer(400, "SendingPausedException", f"Sending is paused for tenant {name}: {cause}")

    def sent(self, account: str, name: str, bounced: bool) -> None:
        """A send through the tenant went out (bounced: to an address that bounces); its policy applies."""
        with self._lock:
            t = self._tenants.get((account, name))
            if t is None:
                return
            t.sends += 1
            t.bounces += int(bounced)
            self._apply(t)
        self._put_events()

    # --- for tests and the demo ------------------------------------------------------------------
    def enable(self, account: str, name: str) -> None:
        """SES lifts its pause (the finding closed)."""
        with self._lock:
            t = self._tenant(account, name)
            was = t.aws.status
            t.aws = Status("ENABLED", None)
            t.sends = t.bounces = 0
            if was != "ENABLED":
                self._changed(t, AWS_MANAGED, t.aws)
        self._put_events()

    def tenants(self, account: str) -> dict[str, Tenant]:
        with self._lock:
            return {name: t for (acct, name), t in self._tenants.items() if acct == account}

    # --- policies --------------------------------------------------------------------------------
    def _finding(self, t: Tenant) -> str | None:
        if t.sends < POLICY_MIN_SENDS:
            return None
        rate = t.bounces / t.sends
        return "HIGH" if rate > HIGH_BOUNCE_RATE else "LOW" if rate > LOW_BOUNCE_RATE else None

    def _put_events(self) -> None:
        """The status changes' events, put on the bus outside the lock (a function that follows one reads the
        tenant here); best effort, as SES's: a bus that fails never fails the call that changed the status."""
        with self._lock:
            events, self._events = self._events, []
        for event in events:
            if self.put_event is not None:
                try:
                    self.put_event(*event)
                except Exception:
                    logging.getLogger(__name__).exception("SES status event not put on the bus")

    def _changed(self, t: Tenant, origin: str, record: Status) -> None:
        """SES's event of the change, to put on the event bus once the lock is let go."""
        at = datetime.fromtimestamp(record.at, UTC)
        shaped: dict[str, Any] = {
            "status": record.status,
            "lastUpdatedTimestamp": [at.year, at.month, at.day, at.hour, at.minute, at.second, at.microsecond * 1000],
        }
        if record.cause:
            shaped["cause"] = record.cause
        detail_type = "Sending Status Disabled" if record.status == "DISABLED" else "Sending Status Enabled"
        detail = {"version": "1.0.0", "data": {"origin": origin, "record": shaped}}
        self._events.append(("aws.ses", detail_type, [t.arn], detail, t.arn.split(":")[4]))

    def _apply(self, t: Tenant) -> None:
        impact = self._finding(t)
        policy = t.policy.rsplit("/", 1)[-1]
        pauses = (policy == "standard" and impact == "HIGH") or (policy == "strict" and impact is not None)
        if pauses and t.aws.status != "DISABLED":
            t.aws = Status(
                "DISABLED",
                f"The bounce rate exceeded {HIGH_BOUNCE_RATE if impact == 'HIGH' else LOW_BOUNCE_RATE:.1%} based on "
                f"a representative volume of {t.sends} emails.",
            )
            self._changed(t, AWS_MANAGED, t.aws)

    def _tenant(self, account: str, name: str) -> Tenant:
        t = self._tenants.get((account, name))
        if t is None:
            raise Answer(404, "NotFoundException", f"Tenant {name} does not exist.")
        return t

    def _by_arn(self, account: str, arn: str | None) -> Tenant:
        for (acct, _name), t in self._tenants.items():
            if acct == account and t.arn == arn:
                return t
        raise Answer(404, "NotFoundException", f"Reputation entity {arn} does not exist.")


_ROUTES = (
    ("POST", "/v2/email/tenants", "create_tenant"),
    ("POST", "/v2/email/tenants/get", "get_tenant"),
    ("POST", "/v2/email/tenants/resources", "associate"),
    ("POST", "/v2/email/tenants/resources/list", "list_resources"),
)
_ENTITY = "/v2/email/reputation/entities/RESOURCE/"


def _route(method: str, path: str) -> tuple[str, str | None] | None:
    path = path.rstrip("/")
    for m, p, op in _ROUTES:
        if method == m and path == p:
            return op, None
    if path.startswith(_ENTITY):
        rest = path[len(_ENTITY) :]
        if method == "PUT" and rest.endswith("/policy"):
            return "put_policy", unquote(rest[: -len("/policy")])
        if method == "PUT" and rest.endswith("/customer-managed-status"):
            return "put_customer_status", unquote(rest[: -len("/customer-managed-status")])
        if method == "GET":
            return "get_entity", unquote(rest)
    return None


def _required(p: dict[str, Any], key: str) -> str:
    value = p.get(key)
    if not isinstance(value, str) or not value:
        raise Answer(400, "BadRequestException", f"{key} is required.")
    return value


def _resource_type(arn: str) -> str:
    kind = arn.split(":", 5)[-1].split("/", 1)[0] if arn.startswith("arn:aws:ses:") else ""
    types = {"identity": "EMAIL_IDENTITY", "configuration-set": "CONFIGURATION_SET", "template": "EMAIL_TEMPLATE"}
    if kind not in types:
        raise Answer(400, "BadRequestException", f"Resource {arn} cannot be associated with a tenant.")
    return types[kind]


def _headers(code: str | None) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "x-amzn-RequestId": str(uuid.uuid4())}
    if code:
        headers["x-amzn-ErrorType"] = code
    return headers


def _json_time(value: Any) -> Any:
    raise TypeError(f"not JSON: {value!r}")
