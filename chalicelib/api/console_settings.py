"""The console's settings page: the tenant's standing as GET /tenant answers it (plan, rate, Sender and From
addresses, every pause with who set it, why and who may lift it, SES's status of its SES tenant, the daily
cap and today's use), and the tenant's own pause of all its sending, set and lifted by its users whose role
is sender or admin.

A tenant whose first message has not come yet sees what it will see then, and how it begins.
"""

from __future__ import annotations

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
from chalicelib.core.errors import Refused
from chalicelib.stores.pauses import LIFTED_BY, OWNER_NAMES, TENANT

SAID = ("done",)
SCOPE = "settings"
DONE = {
    "paused": "Paused: none of your email goes out until you resume. Campaigns keep their place.",
    "resumed": "Your own pause is lifted. Email goes out again, unless another pause below still holds it.",
}
MAX_REASON = 200  # as POST /tenant/pause takes it


def _settings_page(request: Request, session: Session, status: int = 200, problem: str | None = None) -> Response:
    c = wiring.container()
    said = read_notice(session, SCOPE, SAID, dict(request.query_params or {}))
    tenant = c.tenant_view.get_for(session.tenant_id)
    own_pause = any(p["by"] == TENANT for p in tenant["pauses"])
    return page(
        request,
        "settings.html",
        status,
        session,
        title="Settings",
        active="settings",
        tenant=tenant,
        owners=OWNER_NAMES,
        lifted_by=LIFTED_BY,
        own_pause=own_pause,
        may_pause=session.role >= Role.SENDER,
        notice=DONE.get(said.get("done", "")),
        problem=problem,
        max_reason=MAX_REASON,
    )


def _own_pause(request: Request, verb: str) -> Response:
    def act(session: Session, fields: dict[str, str]) -> Response:
        api = wiring.container().tenant_api
        try:
            if verb == "pause":
                api.pause_tenant(session.tenant_id, {"reason": fields.get("reason", "").strip()})
            else:
                api.resume_tenant(session.tenant_id)
        except Refused as why:
            return _settings_page(request, session, answers.status_of(why), why.detail)
        done: dict[str, str | int] = {"done": "paused" if verb == "pause" else "resumed"}
        return redirect(f"{base_path(request)}/console/settings?{signed_notice(session, SCOPE, SAID, done)}")

    return signed_form(request, Role.SENDER, "pause or resume the tenant's sending", act)


def routes() -> Blueprint:
    """A fresh blueprint of the settings page (chalicelib.api.edge.blueprint says why fresh)."""
    bp = Blueprint(__name__)

    @bp.route("/console/settings", methods=["GET"])
    def settings() -> Response:
        request = bp.current_request
        return signed_in(request, lambda session: _settings_page(request, session))

    @bp.route("/console/settings/pause", methods=["POST"], content_types=FORMS)
    def pause() -> Response:
        return _own_pause(bp.current_request, "pause")

    @bp.route("/console/settings/resume", methods=["POST"], content_types=FORMS)
    def resume() -> Response:
        return _own_pause(bp.current_request, "resume")

    return bp
