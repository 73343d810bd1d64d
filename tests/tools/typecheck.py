"""mypy over the project: clean over what `[tool.mypy] files` names (app.py, chalicelib, the fakes), and over
`infra/` no error beyond a checked-in baseline that only shrinks.

The baseline (`tests/tools/mypy-infra-baseline.txt`) holds each known error as `path: message [code]`,
without its line number, so that an edit above an old error does not look like a new one. A new error
fails; an error fixed but still listed fails too, so that the baseline shrinks with each fix
(`python -m tests.tools.typecheck --update-baseline` writes it anew, never to add: review its diff)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BASELINE = Path(__file__).with_name("mypy-infra-baseline.txt")
_ERROR = re.compile(r"^(?P<path>[^:]+):\d+(?::\d+)?: error: (?P<message>.*)$")


def _mypy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=ROOT, capture_output=True, text=True)


def _errors(output: str, under: str) -> Counter[str]:
    found: Counter[str] = Counter()
    for line in output.splitlines():
        m = _ERROR.match(line)
        if m and m["path"].startswith(under):
            found[f"{m['path']}: {m['message']}"] += 1
    return found


def main(argv: list[str]) -> int:
    configured = _mypy()
    if configured.returncode != 0:
        print(configured.stdout + configured.stderr, file=sys.stderr)
        return 1
    infra = _errors(_mypy("infra").stdout, "infra/")
    if "--update-baseline" in argv:
        BASELINE.write_text("".join(f"{e}\n" for e in sorted(infra.elements())), encoding="utf-8")
        print(f"mypy: infra baseline written, {sum(infra.values())} errors")
        return 0
    known = Counter(line for line in BASELINE.read_text(encoding="utf-8").splitlines() if line)
    new, gone = infra - known, known - infra
    for error in sorted(new.elements()):
        print(f"mypy: new in infra/: {error}", file=sys.stderr)
    for error in sorted(gone.elements()):
        print(f"mypy: fixed, so take it out of {BASELINE.name}: {error}", file=sys.stderr)
    if new or gone:
        return 1
    print(f"mypy: {configured.stdout.strip()}; infra/ at its baseline of {sum(known.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
