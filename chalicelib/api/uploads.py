"""/uploads: recipients uploaded straight to S3 and read into a report (chalicelib.control.campaign_sends)."""

from __future__ import annotations

from typing import Any

from chalice import Blueprint

from chalicelib import wiring
from chalicelib.api.edge import Call, Route, blueprint
from chalicelib.api.principal import Role


def new_upload(call: Call) -> dict[str, Any]:
    """An upload, and the presigned form its file is POSTed to (S3 keeps it 30 days)."""
    return wiring.container().campaign_sends.new_upload(call.tenant, call.object_body())


def list_uploads(call: Call) -> dict[str, Any]:
    """The tenant's uploads still kept, newest first."""
    return wiring.container().campaign_sends.list_uploads(call.tenant)


def show_upload(call: Call, upload_id: str) -> dict[str, Any]:
    """An upload's state and report, with a link to its refused rows."""
    return wiring.container().campaign_sends.show_upload(call.tenant, upload_id)


def read_upload(call: Call, upload_id: str) -> dict[str, Any]:
    """Read the uploaded file into recipients and a report, in the background (`{"addressColumn": ...}`)."""
    return wiring.container().campaign_sends.read_upload(call.tenant, upload_id, call.object_body())


ROUTES = (
    Route("/uploads", list_uploads),
    Route("/uploads", new_upload, ("POST",), Role.SENDER, status=201),
    Route("/uploads/{upload_id}", show_upload),
    Route("/uploads/{upload_id}/read", read_upload, ("POST",), Role.SENDER, status=202),
)


def routes() -> Blueprint:
    return blueprint(__name__, ROUTES)
