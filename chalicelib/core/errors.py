"""Every exception moonsend raises, in one place.

Handlers catch these by type to decide what is recorded and what is retried, so a new failure mode
gets a class here rather than a string match somewhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class MoonsendError(Exception):
    """Base of all moonsend errors."""


@dataclass(frozen=True)
class FieldError:
    """One reason a message is invalid, named by the path of the field (`recipient.email`)."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


class MessageInvalid(MoonsendError):
    """A message that cannot be processed as a whole; `errors` says which fields and why."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = list(errors)
        super().__init__("; ".join(str(e) for e in self.errors))


class TemplateInvalid(MoonsendError):
    """A campaign template that does not parse; the message carries line and column."""


class RenderFailed(MoonsendError):
    """A template that parsed but failed for one recipient (strict undefined, resource limit)."""


class QueueNotOurs(MoonsendError):
    """A queue name that does not belong to this app and stage: never drained, never created."""


class SendFailed(MoonsendError):
    """SES refused a message for good (rejected, invalid address): the recipient is failed."""


class KeysRejected(SendFailed):
    """AWS refused the tenant's keys for a send (invalid, deactivated): failed, unless newer keys of the same
    account are registered, which the drainer then takes on a retry."""


class SendThrottled(MoonsendError):
    """SES said the sending rate was exceeded: retry later, never a failure."""


class QuotaExhausted(MoonsendError):
    """The SES account's daily quota is used up: stop draining and leave the messages queued."""


class QueueRetiring(MoonsendError):
    """The tenant's queue is being removed for idleness right now: retry the event in a minute."""


class QueueRecentlyRetired(MoonsendError):
    """SQS refused to create the tenant's queue again (QueueDeletedRecently): the idle-queue job removed it
    less than 60 s ago, and SQS takes no queue of that name until then. Nothing was queued: the invocation
    raises and is retried (precompile by Lambda 1 and 3 minutes later, the release of scheduled email at
    its next minute)."""


class SecretsKeyNotReady(MoonsendError):
    """KMS refused to encrypt a tenant's SES secret under the stage's key (AccessDeniedException). The roles'
    grants are keyed on the key's alias (`kms:ResourceAliases`), and KMS says an alias change may take up to
    five minutes to affect authorization: a paid tenant's first message right after the data stack's first
    create meets this. Nothing of the message was stored: the invocation raises and Lambda retries it (1 and
    3 minutes later); refused still, it waits on the on-failure queue for `moonsend replay-failed`."""


class TransientSendError(MoonsendError):
    """A 5xx from SES, or a request that never reached it: retried with backoff, then dead-lettered."""


class SendOutcomeUnknown(MoonsendError):
    """The request reached SES but its answer was lost (read timeout, connection closed): SES may have
    accepted the email. Never retried before SES's Send event could have said so (the claim is kept)."""


class LinkInvalid(MoonsendError):
    """A signed link that does not verify (forged, altered, expired, malformed): why is for logs only."""


class LinksNotConfigured(MoonsendError):
    """The function makes links but was not told where they point (its environment lacks the API's URL)."""


class SenderRefused(MoonsendError):
    """A message's sender that moonsend will not use: keys of another AWS account, a From address another
    free-plan tenant owns, a Sender other than the one its campaign was fixed with. Every recipient of the
    message is rejected with this reason."""


class RegistryConflict(MoonsendError):
    """The tenant's registry entry kept changing under a conditional write: the event is retried."""


class DeliveryNotQueued(MoonsendError):
    """SQS did not take every webhook delivery (the ledger's stream gives the batch again)."""


class TenantSendingPaused(MoonsendError):
    """SES refused a send through an SES tenant with SendingPausedException (the tenant's pause, or the
    account's: the tenant's status tells which)."""


class TenantNotReady(TransientSendError):
    """SES refused a send through an SES tenant for a resource not associated with it: set up again, retried."""


# --- a request refused (the tenant API's and the CLI's): typed, and free of HTTP ---------------------------------
class Refused(MoonsendError):
    """A tenant's (or an operator's) request the domain will not carry out: `detail` says why in words a person
    reads, `members` what a client reads beside it. chalicelib.api.answers turns each into an answer (RFC 9457
    problems for the API); the CLI prints them."""

    def __init__(self, detail: str, **members: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.members = members


class NotFound(Refused):
    """What was named is not the tenant's (or is nothing): the same refusal for a wrong key, another tenant's
    campaign and one that never was, so that nothing is learned about other tenants."""

    def __init__(self, detail: str = "not found", **members: Any) -> None:
        super().__init__(detail, **members)


class Invalid(Refused):
    """What was given cannot be taken: `detail` names the field and what it must be."""


class Unprocessable(Refused):
    """Understood, and not to be done as asked (an Idempotency-Key given again with another request)."""


class Conflict(Refused):
    """Not possible in the state things are in (a cancelled campaign resumed, a bounce lifted)."""


class Busy(Refused):
    """Not now: asked too often, or while the same work runs; `retry_after_s` says when to ask again."""

    def __init__(self, detail: str, retry_after_s: int | None = None, **members: Any) -> None:
        if retry_after_s is not None:
            members["retryAfterSeconds"] = retry_after_s
        super().__init__(detail, **members)
        self.retry_after_s = retry_after_s
