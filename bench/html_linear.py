"""Time per KiB of link tracking and the text part on hostile markup, 8 to 256 KiB (issue 20).

Regular expressions and html.parser scan to the end of the document from every unclosed `<`: 47 KiB of
`<a ` took 19 s before. A flat time per KiB from 8 to 256 KiB is linear time. Usage:
python bench/html_linear.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chalicelib.core.links import LinkSigner
from chalicelib.core.mime import html_to_text
from chalicelib.ingest.tracking import add_tracking

PATTERNS = [
    "<a ",
    "<",
    "< ",
    "<!--",
    "<style>",
    '<a title="',
    "<a href='https://x.example/",
    "<a href=x>",
    '<p>Hi <a href="https://shop.example/p?a=1&amp;b=2">Buy</a></p>',  # real links, all tracked
    "<" + "a" * 4000,  # an unclosed tag name thousands long (a backtracking name rescans per character)
    "<a" + "b" * 4000 + " x",
]
SIZES_KIB = (8, 32, 128, 256)
LINKS = LinkSigner(b"k" * 32, "https://api.example.com/api")


def per_kib_us(work, text: str) -> float:
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        work(text)
        best = min(best, time.perf_counter() - t)
    return best * 1e6 / (len(text) / 1024)


def main() -> int:
    print(f"{'pattern':<40} {'part':<9}" + "".join(f"{k:>9} KiB" for k in SIZES_KIB) + "   256/8")
    worst = 0.0
    for pattern in PATTERNS:
        for part, work in (
            ("tracking", lambda s: add_tracking(s, LINKS, "acme", "c1", "ann@example.org")),
            ("text", html_to_text),
        ):
            row = [per_kib_us(work, pattern * (k * 1024 // len(pattern))) for k in SIZES_KIB]
            ratio = row[-1] / row[0]
            worst = max(worst, ratio)
            print(f"{pattern[:38]!r:<40} {part:<9}" + "".join(f"{us:10.1f} us" for us in row) + f"   {ratio:5.2f}")
    print(f"largest growth of time per KiB from 8 to 256 KiB: {worst:.2f}x (linear: about 1)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
