"""The console's suppressions page: the tenant's suppression list as `GET /suppressions` answers it, filtered
by reason and found by an address or its start, a page at a time; an admin adds addresses (pasted, one a
line or separated by commas, at most the API's 1,000) and lifts the tenant's own entries. An entry the
tenant did not add (a bounce, a complaint, an unsubscribe) shows why it stays instead of a button, and the
server refuses to lift it whatever was posted.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

from chalice import Blueprint, Response
from chalice.app import Request

from chalicelib import wiring
from chalicelib.api import answers
from chalicelib.api.console_http import (
    FORMS,
    base_path,
    page,
    read_notice,
    redirect,
    signed_form,
    signed_in,
    signed_notice,
)
from chalicelib.api.principal import Role
from chalicelib.console.sessions import Session
from chalicelib.control.suppression_api import DEFAULT_REASON, MAX_ADD, MAX_REASON
from chalicelib.core.contract import MAX_ADDRESS_LENGTH
from chalicelib.core.errors import Invalid, NotFound, Refused
from chalicelib.stores.ports.suppression import BOUNCE, COMPLAINT, KEPT_BECAUSE, MANUAL, REASONS, UNSUBSCRIBE

PAGE = 50
ASKED = ("reason", "prefix", "after")  # what the page's filters and paging carry
SCOPE = "suppressions"
SAID = ("done", "n", "already", "who", "still")  # what a change's redirect says, in this order
# The add form's body: up to MAX_ADD addresses of the longest length, percent-encoded, and the rest.
MAX_ADD_FORM_BYTES = MAX_ADD * (MAX_ADDRESS_LENGTH * 3 + 3) + 4096
REASON_NAMES = {BOUNCE: "bounced", COMPLAINT: "complained", UNSUBSCRIBE: "unsubscribed", MANUAL: "added by you"}


def _page_path(request: Request) -> str:
    return f"{base_path(request)}/console/suppressions"


def _notice(session: Session, query: dict[str, str]) -> str | None:
    said = read_notice(session, SCOPE, SAID, query)
    if said.get("done") == "added":
        already = f"; {said.get('already')} were on it already" if said.get("already", "0") != "0" else ""
        return f"Added {said.get('n', '0')} to the list{already}. None of your campaigns mails them from now on."
    if said.get("done") == "lifted":
        still = said.get("still")
        if still:
            return f"Lifted {said.get('who', '')} from your list, but it is still {still}."
        return f"Lifted {said.get('who', '')}: your campaigns may mail it again."
    return None


def _suppressions_page(request: Request, session: Session, status: int = 200, **shown: Any) -> Response:
    given: dict[str, str] = dict(request.query_params or {})
    query = {k: given[k].strip() for k in ASKED if given.get(k, "").strip()}
    query["prefix"] = query.get("prefix", "").lower()
    if not query["prefix"]:
        del query["prefix"]
    try:
        listed = wiring.container().suppression_api.list_for(session.tenant_id, {**query, "limit": str(PAGE)})
    except Refused as why:
        listed, status, shown = {"suppressions": [], "next": None}, answers.status_of(why), {"problem": why.detail}
    filters: dict[str, str] = {k: query[k] for k in ("reason", "prefix") if k in query}
    later = None
    if listed["next"]:
        onward: dict[str, str] = {**filters, "after": str(listed["next"])}
        later = f"{_page_path(request)}?{urllib.parse.urlencode(onward)}"
    return page(
        request,
        "suppressions.html",
        status,
        session,
        title="Suppressions",
        active="suppressions",
        entries=listed["suppressions"],
        reasons=REASONS,
        reason_names=REASON_NAMES,
        kept_because=KEPT_BECAUSE,
        manual=MANUAL,
        asked=filters,
        later=later,
        read_on=bool(query.get("after")),
        admin=session.role >= Role.ADMIN,
        most=MAX_ADD,
        max_reason=MAX_REASON,
        notice=_notice(session, given),
        **{"problem": None, "invalid": [], "typed": "", "typed_reason": "", **shown},
    )


def addresses_in(text: str) -> list[str]:
    """The addresses of a pasted list: one a line, or separated by commas, semicolons or spaces."""
    return [a for a in re.split(r"[\s,;]+", text) if a]


def _add(request: Request) -> Response:
    def act(session: Session, fields: dict[str, str]) -> Response:
        typed, reason = fields.get("addresses", ""), fields.get("reason", "").strip() or DEFAULT_REASON
        try:
            done = wiring.container().suppression_api.add_for(
                session.tenant_id, {"addresses": addresses_in(typed), "reason": reason}
            )
        except Refused as why:
            invalid = why.members.get("invalid", []) if isinstance(why, Invalid) else []
            status = answers.status_of(why)
            return _suppressions_page(
                request, session, status, problem=why.detail, invalid=invalid, typed=typed, typed_reason=reason
            )
        said: dict[str, str | int] = {"done": "added", "n": done["added"], "already": done["alreadySuppressed"]}
        return redirect(f"{_page_path(request)}?{signed_notice(session, SCOPE, SAID, said)}")

    return signed_form(request, Role.ADMIN, "add suppressions", act, MAX_ADD_FORM_BYTES)


def _lift(request: Request) -> Response:
    def act(session: Session, fields: dict[str, str]) -> Response:
        address = fields.get("address", "").strip()
        try:
            done = wiring.container().suppression_api.remove_for(session.tenant_id, address)
        except NotFound as why:
            return _suppressions_page(request, session, 404, problem=f"{address}: {why.detail}.")
        except Refused as why:
            return _suppressions_page(request, session, answers.status_of(why), problem=why.detail)
        said: dict[str, str | int] = {"done": "lifted", "who": done["email"]}
        if done.get("stillSuppressed"):
            said["still"] = str(done["stillSuppressed"])
        return redirect(f"{_page_path(request)}?{signed_notice(session, SCOPE, SAID, said)}")

    return signed_form(request, Role.ADMIN, "lift suppressions", act)


def routes() -> Blueprint:
    """A fresh blueprint of the suppressions page (chalicelib.api.edge.blueprint says why fresh)."""
    bp = Blueprint(__name__)

    @bp.route("/console/suppressions", methods=["GET"])
    def console_suppressions() -> Response:
        request = bp.current_request
        return signed_in(request, lambda session: _suppressions_page(request, session))

    @bp.route("/console/suppressions", methods=["POST"], content_types=FORMS)
    def console_add_suppressions() -> Response:
        return _add(bp.current_request)

    @bp.route("/console/suppressions/lift", methods=["POST"], content_types=FORMS)
    def console_lift_suppression() -> Response:
        return _lift(bp.current_request)

    return bp
