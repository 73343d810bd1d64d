"""What arrives on the PrecompileEmail topic: a campaign's recipients, or a digest event (docs/digests.md)."""

from __future__ import annotations

import json
from typing import Any

from chalicelib.core.digest_contract import is_digest_event
from chalicelib.digest.intake import DigestIntake
from chalicelib.ingest.precompile import Precompiler


class PrecompileTopic:
    def __init__(self, precompiler: Precompiler, digests: DigestIntake) -> None:
        self._precompiler = precompiler
        self._digests = digests

    def handle(self, raw: str) -> Any:
        # Read twice only for a campaign message that mentions "digest": a substring test first.
        if '"digest"' in raw:
            try:
                message = json.loads(raw)
            except (ValueError, RecursionError):
                message = None
            if isinstance(message, dict) and is_digest_event(message):
                return self._digests.handle(message, raw)
        return self._precompiler.handle(raw)
