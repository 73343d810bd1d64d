"""Unsubscribing: the page behind `{{ unsubscribe_url }}` and RFC 8058 one-click.

GET shows a confirmation page (plain HTML with a form: no JavaScript, no images), POST unsubscribes at
once: the form's button, and mailbox providers' one-click (`List-Unsubscribe=One-Click` in the body,
RFC 8058) alike. The address is suppressed for that tenant (every later campaign of the tenant skips it)
and the campaign counts it. A link that does not verify gets the same plain 404 page whatever is wrong
with it.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from chalicelib.core import log
from chalicelib.core.errors import LinkInvalid
from chalicelib.core.links import LinkSigner
from chalicelib.stores.ports.suppression import UNSUBSCRIBE, SuppressionList
from chalicelib.stores.recorder import Recorder

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<meta name="robots" content="noindex"><title>{title}</title></head>
<body style="font-family:sans-serif;max-width:32em;margin:3em auto;padding:0 1em">
<h1>{title}</h1>{body}</body></html>"""


@dataclass(frozen=True)
class Page:
    status: int
    html: str


def _page(status: int, title: str, body: str) -> Page:
    return Page(status, _PAGE.format(title=html.escape(title), body=body))


NOT_FOUND = _page(404, "Link not found", "<p>This link is not valid.</p>")


class Unsubscribes:
    def __init__(self, links: LinkSigner, suppressions: SuppressionList, recorder: Recorder) -> None:
        self._links = links
        self._suppressions = suppressions
        self._recorder = recorder

    def confirm_page(self, token: str) -> Page:
        try:
            claims = self._links.verify("unsubscribe", token)
        except LinkInvalid:
            return NOT_FOUND
        return _page(
            200,
            "Unsubscribe",
            f"<p>Stop receiving these emails at <strong>{html.escape(claims.email)}</strong>?</p>"
            '<form method="post"><button type="submit" name="confirm" value="yes" '
            'style="font-size:1.1em;padding:.5em 1.2em">Unsubscribe</button></form>',
        )

    def unsubscribe(self, token: str) -> Page:
        try:
            claims = self._links.verify("unsubscribe", token)
        except LinkInvalid as exc:
            log.info("unsubscribe link refused", reason=str(exc))
            return NOT_FOUND
        new = self._suppressions.add(
            claims.user_id, claims.email, UNSUBSCRIBE, f"unsubscribed from campaign {claims.campaign_id}"
        )
        self._recorder.feedback(claims.user_id, claims.campaign_id, claims.email, "unsubscribed", "one-click")
        log.info("unsubscribed", user=claims.user_id, campaign=claims.campaign_id, new=new)
        return _page(
            200,
            "Unsubscribed",
            f"<p><strong>{html.escape(claims.email)}</strong> will get no more of these emails.</p>",
        )
