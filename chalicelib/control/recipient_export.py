"""A campaign's recipients as one CSV file (RFC 4180, UTF-8 with a byte-order mark so that a spreadsheet
reads it as UTF-8), row for row what `GET /campaigns/{id}/recipients` answers, kept for a short-lived link
(chalicelib.stores.exports).

Every cell is written safe to open in a spreadsheet (chalicelib.core.csv_cells). The file is read in the
API's largest pages within BUDGET_S (API Gateway answers at 29 s); a campaign past that is refused, and says
to page the API instead.
"""

from __future__ import annotations

import csv
import io
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from chalicelib.core.csv_cells import cell
from chalicelib.core.errors import Conflict
from chalicelib.stores.exports import LINK_S, Exports

COLUMNS = ("email", "state", "reason", "messageId", "updatedAt", "feedback", "feedbackDetail", "retries")
PAGE = "1000"  # the API's largest page
BUDGET_S = 20.0

Pages = Callable[[str, str, Mapping[str, str]], dict[str, Any]]


def filename_of(campaign_id: str) -> str:
    """The file's name: the campaign's id in the characters every system takes."""
    return f"{re.sub(r'[^A-Za-z0-9._-]+', '_', campaign_id)[:100] or 'campaign'}-recipients.csv"


class RecipientExport:
    def __init__(
        self, pages: Pages, exports: Exports, clock: Callable[[], float] = time.monotonic, budget_s: float = BUDGET_S
    ) -> None:
        self._pages = pages
        self._exports = exports
        self._clock = clock
        self._budget_s = budget_s

    def export(self, user_id: str, campaign_id: str) -> dict[str, Any]:
        """The file kept, and a link to it: `url`, `rows`, `expiresInSeconds`. NotFound for a campaign the
        tenant does not have (the first page's); Conflict when it takes longer than BUDGET_S to read."""
        started, rows, after = self._clock(), 0, ""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\r\n")
        writer.writerow(COLUMNS)
        while True:
            page = self._pages(user_id, campaign_id, {"limit": PAGE, **({"after": after} if after else {})})
            for r in page["recipients"]:
                writer.writerow([cell(r.get(c)) for c in COLUMNS])
            rows += len(page["recipients"])
            after = page["next"] or ""
            if not after:
                break
            if self._clock() - started > self._budget_s:
                raise Conflict(
                    f"more recipients than the console exports at once ({rows:,} read in {self._budget_s:g} s): "
                    "read them with GET /campaigns/{id}/recipients, a page at a time"
                )
        body = ("\ufeff" + out.getvalue()).encode("utf-8")
        url = self._exports.keep(user_id, filename_of(campaign_id), body)
        return {"url": url, "rows": rows, "expiresInSeconds": LINK_S}
