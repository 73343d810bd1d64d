"""Open and click tracking: a pixel and signed click redirects, added after rendering.

Links are rewritten after Liquid rendered the body, so a link built from recipient data
(`href="https://shop.example/{{ id }}"`) is tracked with its rendered value. Each `href` to an http(s)
URL becomes `<api>/c/<token>`, the token signing the tenant, campaign, recipient and the target URL: the
redirect goes only to a URL that was in that campaign's email (nobody can mint a token for another one,
so there is no open redirect). The unsubscribe link, `mailto:` and `#anchors` are left as they are. An
invisible pixel `<api>/o/<token>` goes before `</body>`. A URL that could not be sent back as a
`Location` header (a control character or white space, once its HTML entities are decoded:
`&#13;&#10;`) is left as it is, untracked. Schemes are matched in any case (`HTTPS://`), as browsers do.
Opens and clicks are recorded once per recipient (unique opens and clicks), a person's apart from a
machine's (chalicelib.ingest.machines). `campaign.tracking: false` turns both off for a campaign.
"""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, replace

from chalicelib.core import html_scan, log
from chalicelib.core.errors import LinkInvalid
from chalicelib.core.links import LinkSigner
from chalicelib.ingest.machines import Hit, machine_evidence
from chalicelib.stores.ledger_model import MACHINE_OF
from chalicelib.stores.ports.ledger import HitContext, LedgerReads
from chalicelib.stores.recorder import Recorder

_BODY_END = re.compile(r"</body\s*>", re.I)
PIXEL = base64.b64decode(b"R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7")  # 1x1 transparent GIF


def add_tracking(body: str, links: LinkSigner, user_id: str, campaign_id: str, email: str) -> str:
    """The rendered body with its links redirected through the click route and the open pixel added.

    Linear in the body's length, whatever its markup (chalicelib.core.html_scan)."""
    unsubscribe_prefix = f"{links.base_url}/unsubscribe/"
    parts: list[str] = []
    done = 0
    for tag in html_scan.anchors(body):
        found = html_scan.href(body, tag)
        if found is None or not found.quoted:
            continue
        url = html.unescape(found.value)
        if url.startswith(unsubscribe_prefix) or not redirectable(url):
            continue
        parts += [body[done : found.start], links.click_url(user_id, campaign_id, email, url)]
        done = found.end
    parts.append(body[done:])
    body = "".join(parts)
    pixel = (
        f'<img src="{links.open_url(user_id, campaign_id, email)}" width="1" height="1" alt="" style="display:none">'
    )
    found_end = _BODY_END.search(body)
    return f"{body[: found_end.start()]}{pixel}{body[found_end.start() :]}" if found_end else body + pixel


_NOT_IN_A_HEADER = re.compile(r"[\x00-\x20\x7f]")


def redirectable(url: str) -> bool:
    """Whether `url` is an http(s) URL (scheme in any case) that can be a `Location` header as it is."""
    scheme = url.split(":", 1)[0].lower()
    return scheme in ("http", "https") and not _NOT_IN_A_HEADER.search(url)


@dataclass(frozen=True)
class Redirect:
    status: int
    location: str | None


class Tracking:
    """The pixel's and the links' hits recorded: a person's as `opened` and `clicked`, a machine's apart
    (chalicelib.ingest.machines), each once per recipient."""

    def __init__(self, links: LinkSigner, recorder: Recorder, ledger: LedgerReads) -> None:
        self._links = links
        self._recorder = recorder
        self._ledger = ledger

    def opened(self, token: str, hit: Hit) -> bool:
        """Record an open (answered with the pixel whatever happens: a pixel never shows an error)."""
        try:
            claims = self._links.verify("open", token)
        except LinkInvalid:
            return False
        self._record(claims.user_id, claims.campaign_id, claims.email, "opened", "pixel", hit)
        return True

    def clicked(self, token: str, hit: Hit) -> Redirect:
        try:
            claims = self._links.verify("click", token)
        except LinkInvalid as exc:
            log.info("click link refused", reason=str(exc))
            return Redirect(404, None)
        if not claims.url or not redirectable(claims.url):
            return Redirect(404, None)
        at_link = replace(hit, link=claims.url)  # what the route cannot know: which link of the email it is
        self._record(claims.user_id, claims.campaign_id, claims.email, "clicked", claims.url, at_link)
        return Redirect(302, claims.url)

    def _record(self, user: str, campaign: str, email: str, kind: str, detail: str, hit: Hit) -> None:
        try:
            evidence = machine_evidence(hit, self._context(user, campaign, email))
            if evidence is None:
                self._recorder.feedback(user, campaign, email, kind, detail)
            else:
                self._recorder.feedback(user, campaign, email, MACHINE_OF[kind], detail, evidence=evidence)
        except Exception as exc:  # the reader's redirect matters more than the count
            log.warning("tracking not recorded", user=user, campaign=campaign, error=type(exc).__name__)

    def _context(self, user: str, campaign: str, email: str) -> HitContext | None:
        """The recipient's send, delivery and first click; None when they cannot be read (the request's own
        evidence still counts)."""
        try:
            return self._ledger.hit_context(user, campaign, email)
        except Exception as exc:
            log.warning("tracking context not read", user=user, campaign=campaign, error=type(exc).__name__)
            return None
