"""GET /tenant spends the platform account's SES control-plane calls sparingly: every answer SES gives (a
status, no SES tenant yet, a throttle) is kept per container, so twenty requests make one call, not twenty
(the review's count), and the guard and free tenants' first sends keep the account's one call a second."""

from __future__ import annotations

from botocore.exceptions import ClientError

from chalicelib.control.tenant_view import SES_STATUS_ERROR_RETRY_S, SES_STATUS_MAX_AGE_S, PlatformTerms, TenantView
from chalicelib.stores.ports.sending import TenantStatus
from tests.fakes.senders import FakeFreeAddresses
from tests.fakes.tenants import FakeTenants
from tests.unit.test_answers_by_the_document import _FREE, _Usage


class _CountingSes:
    """SES's status reads, counted; each answers `answer` (a status, None: no SES tenant, or raises it)."""

    def __init__(self, answer: TenantStatus | Exception | None) -> None:
        self.answer = answer
        self.calls = 0

    def status(self, user_id: str, region: str, *, max_age_s: float = 60) -> TenantStatus | None:
        self.calls += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def _view(ses: _CountingSes, now: list[float]) -> TenantView:
    terms = PlatformTerms("us-east-1", 1.0, 200)
    return TenantView(FakeTenants(_FREE), _Usage(), ses, FakeFreeAddresses(), terms, clock=lambda: now[0])


THROTTLED = ClientError({"Error": {"Code": "TooManyRequestsException", "Message": "Too many requests"}}, "GetTenant")


def test_a_tenant_with_no_ses_tenant_yet_is_asked_about_once_in_five_minutes():
    ses, now = _CountingSes(None), [1000.0]
    view = _view(ses, now)
    assert all(view.get_for("acme")["ses"] is None for _ in range(20))
    assert ses.calls == 1
    now[0] += SES_STATUS_MAX_AGE_S + 1
    view.get_for("acme")
    assert ses.calls == 2


def test_a_throttled_read_is_not_asked_again_for_a_minute():
    ses, now = _CountingSes(THROTTLED), [1000.0]
    view = _view(ses, now)
    answers = [view.get_for("acme") for _ in range(20)]
    assert {a["ses"] for a in answers} == {None} and ses.calls == 1
    ses.answer = TenantStatus("moonsend-dev-acme", "ENABLED", None, None)
    now[0] += SES_STATUS_ERROR_RETRY_S + 1
    assert view.get_for("acme")["ses"]["sending"] == "ENABLED" and ses.calls == 2


def test_a_found_status_is_kept_five_minutes():
    ses, now = _CountingSes(TenantStatus("moonsend-dev-acme", "DISABLED", "bounce rate", None)), [1000.0]
    view = _view(ses, now)
    for _ in range(20):
        assert view.get_for("acme")["ses"]["cause"] == "bounce rate"
    assert ses.calls == 1
