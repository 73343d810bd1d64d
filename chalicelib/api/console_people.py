"""The console's people page: who may sign in to the tenant and as what; an admin invites (an email with
a sign-in link goes to the address), changes a role, signs a person out everywhere, or removes them.

Everyone signed in sees the list; only an admin's forms change it, and the server refuses the others
whatever the page showed. A change answers with a redirect to the page, which says what was done.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from chalice import Blueprint, Response
from chalice.app import Request

from chalicelib import wiring
from chalicelib.api import answers
from chalicelib.api.console_http import (
    FORMS,
    base_path,
    console_url,
    page,
    read_notice,
    redirect,
    secret,
    signed_form,
    signed_in,
    signed_notice,
)
from chalicelib.api.principal import Role
from chalicelib.console.devices import described
from chalicelib.console.links import LINK_S
from chalicelib.console.mail import invitation_mail
from chalicelib.console.people import PersonRefused, address_of
from chalicelib.console.sessions import Session, listed_id_of, sid_of
from chalicelib.control.api_keys import MAX_KEYS, MAX_LABEL
from chalicelib.core.errors import NotFound, Refused

log = logging.getLogger(__name__)

ROLES = {r.name.lower(): r for r in Role}

SAID = ("done", "who", "mailed")  # what a change's redirect says, in this order
SCOPE = "people"
DONE = {
    "invited": "{who} is invited{mailed}",
    "role": "{who}'s role is changed; it holds from their next page",
    "signed-out": "{who} is signed out everywhere: their next page asks them to sign in",
    "removed": "{who} is removed: their next page asks them to sign in, and they cannot",
    "revoked": "The key {who} is revoked: a request with it is refused from now on, and the console sessions it "
    "began are over",
    "ended": "The session is over: its next page asks {who} to sign in",
}
MAILED = {
    "yes": ", and an email with a sign-in link is on its way.",
    "no": ": the email could not be sent, so tell them to ask for a sign-in link on the console's sign-in page.",
    "held": ": too many invitation emails lately (from this tenant, or to this address), so none was sent; "
    "they can ask for a sign-in link on the console's sign-in page.",
    "off": ": this stage emails no sign-in links, so they can sign in once your operator sets its From address.",
}


def role_named(name: str) -> Role:
    found = ROLES.get(name.strip().lower())
    if found is None:
        raise PersonRefused(f"{name!r} is not a role: one of {', '.join(ROLES)}")
    return found


def _by(session: Session) -> str:
    """Who made a change, as the people table records it."""
    return session.person or "api-key"


def _people_page(request: Request, session: Session, status: int = 200, problem: str | None = None) -> Response:
    c = wiring.container()
    said = read_notice(session, SCOPE, SAID, dict(request.query_params or {}))
    notice = None
    if said.get("done") in DONE:
        notice = DONE[said["done"]].format(who=said.get("who", ""), mailed=MAILED.get(said.get("mailed", ""), "."))
    admin = session.role >= Role.ADMIN
    return page(
        request,
        "people.html",
        status,
        session,
        title="People",
        active="people",
        people=c.people.of_tenant(session.tenant_id),
        roles=ROLES,
        role_names={int(r): n for n, r in ROLES.items()},
        admin=admin,
        notice=notice,
        problem=problem,
        **(_keys_and_sessions(request, session) if admin else {}),
    )


def _keys_and_sessions(request: Request, session: Session) -> dict[str, Any]:
    """What an admin sees beside the people: the tenant's API keys and its live sessions (whose they are,
    from where, and which is this one)."""
    c = wiring.container()
    own = secret(request)
    return {
        "keys": c.api_keys.listed(session.tenant_id),
        "most_keys": MAX_KEYS,
        "max_label": MAX_LABEL,
        "sessions": c.sessions.of_tenant(session.tenant_id),
        "key_names": c.api_keys.shown_by_digest(session.tenant_id),
        "this_session": listed_id_of(sid_of(own)) if own else None,
        "device": described,
    }


def _change(
    request: Request,
    doing: str,
    act: Callable[[Session, dict[str, str]], dict[str, str | int]],
    missing: str = "This tenant has no such person.",
) -> Response:
    """A change to the tenant's people, keys or sessions (an admin's): checked, done, answered with a redirect
    saying so; `missing` when what it names is not there (the act said nothing)."""

    def change(session: Session, fields: dict[str, str]) -> Response:
        try:
            said = act(session, fields)
        except PersonRefused as why:
            return _people_page(request, session, 400, str(why))
        if not said:
            return _people_page(request, session, 404, missing)
        return redirect(f"{base_path(request)}/console/people?{signed_notice(session, SCOPE, SAID, said)}")

    return signed_form(request, Role.ADMIN, doing, change)


def _make_key(request: Request) -> Response:
    def act(session: Session, fields: dict[str, str]) -> Response:
        try:
            made = wiring.container().api_keys.make(session.tenant_id, _by(session), fields.get("label"))
        except Refused as why:
            return _people_page(request, session, answers.status_of(why), why.detail)
        return page(request, "key_made.html", 201, session, title="Key made", active="people", made=made)

    return signed_form(request, Role.ADMIN, "make API keys", act)


def _revoke_key(session: Session, fields: dict[str, str]) -> dict[str, str | int]:
    try:
        done = wiring.container().api_keys.revoke(session.tenant_id, fields.get("key", ""))
    except NotFound:
        return {}
    return {"done": "revoked", "who": str(done["shown"])}


def _end_session(session: Session, fields: dict[str, str]) -> dict[str, str | int]:
    ended = wiring.container().sessions.end_listed(session.tenant_id, fields.get("session", ""))
    if ended is None:
        return {}
    return {"done": "ended", "who": ended.person or "the API key's holder"}


def _invite(request: Request, session: Session, fields: dict[str, str]) -> dict[str, str | int]:
    c = wiring.container()
    role = role_named(fields.get("role", "viewer"))
    invited = c.people.invite(session.tenant_id, fields.get("address", ""), role, _by(session))
    who = invited.person.address
    if not invited.new:
        return {"done": "role", "who": who}
    return {"done": "invited", "who": who, "mailed": _mail_invitation(request, session, who, role)}


def _mail_invitation(request: Request, session: Session, to: str, role: Role) -> str:
    c = wiring.container()
    sender, base = c.settings.console_from, console_url(request)
    if not sender or not base:
        return "off"
    if c.invitation_guard.take(session.tenant_id) or c.mailbox_guard.take(to):
        log.warning("invitation not mailed: too many lately, from this tenant or to this address")
        return "held"
    token = c.sign_in_links.mint(to)
    mail = invitation_mail(
        sender,
        to,
        session.tenant_id,
        role.name.lower(),
        session.person or "An admin of the tenant",
        f"{base}/link/{token}",
        f"{base}/sign-in",
        LINK_S // 60,
    )
    try:
        c.console_mailer.send(mail)
    except (ClientError, BotoCoreError) as exc:
        log.error("invitation not mailed: %s", exc)
        return "no"
    return "yes"


def routes() -> Blueprint:
    """A fresh blueprint of the people page (chalicelib.api.edge.blueprint says why fresh)."""
    bp = Blueprint(__name__)

    @bp.route("/console/people", methods=["GET"])
    def people() -> Response:
        request = bp.current_request
        return signed_in(request, lambda session: _people_page(request, session))

    @bp.route("/console/people", methods=["POST"], content_types=FORMS)
    def invite() -> Response:
        request = bp.current_request
        return _change(request, "invite people or change roles", lambda s, f: _invite(request, s, f))

    @bp.route("/console/people/sign-out", methods=["POST"], content_types=FORMS)
    def sign_out_everywhere() -> Response:
        def act(session: Session, fields: dict[str, str]) -> dict[str, str | int]:
            who = address_of(fields.get("address", ""))
            done = wiring.container().people.sign_out_everywhere(session.tenant_id, who)
            return {"done": "signed-out", "who": who} if done else {}

        return _change(bp.current_request, "sign people out", act)

    @bp.route("/console/people/keys", methods=["POST"], content_types=FORMS)
    def console_make_key() -> Response:
        return _make_key(bp.current_request)

    @bp.route("/console/people/keys/revoke", methods=["POST"], content_types=FORMS)
    def console_revoke_key() -> Response:
        return _change(
            bp.current_request, "revoke API keys", _revoke_key, "This tenant has no such key: revoked already?"
        )

    @bp.route("/console/people/sessions/end", methods=["POST"], content_types=FORMS)
    def console_end_session() -> Response:
        return _change(bp.current_request, "end sessions", _end_session, "No such session: it is over already.")

    @bp.route("/console/people/remove", methods=["POST"], content_types=FORMS)
    def remove() -> Response:
        def act(session: Session, fields: dict[str, str]) -> dict[str, str | int]:
            who = address_of(fields.get("address", ""))
            done = wiring.container().people.remove(session.tenant_id, who, _by(session))
            return {"done": "removed", "who": who} if done else {}

        return _change(bp.current_request, "remove people", act)

    return bp
