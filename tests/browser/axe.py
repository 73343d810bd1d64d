"""axe-core, which nobody here wrote, for the pages' accessibility checks: fetched from the npm registry at
its pinned version, its tarball checked against the registry's published integrity, kept under build/
(never committed), and run in the page by Selenium."""

from __future__ import annotations

import base64
import hashlib
import io
import subprocess
import tarfile
from pathlib import Path
from typing import Any

VERSION = "4.14.1"
INTEGRITY = "sha512-FHfa+lmNjQZfJz1q8wKqIDwC6DExcHt/pkjNQb09a3NPjCKg2rhu5qb2S4r76ASyFNNtuFooJpZe37OgudVGtQ=="
CACHE = Path(__file__).resolve().parents[2] / "build" / "npm"


def source() -> str:
    tarball = CACHE / f"axe-core-{VERSION}.tgz"
    if not tarball.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["npm", "pack", f"axe-core@{VERSION}", "--silent", "--pack-destination", str(CACHE)],
            check=True,
            capture_output=True,
            timeout=120,
        )
    data = tarball.read_bytes()
    digest = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    if digest != INTEGRITY:
        tarball.unlink()
        raise AssertionError(f"axe-core {VERSION}: the tarball is not the one the registry published")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        member = tar.extractfile("package/axe.min.js")
        assert member is not None
        return member.read().decode("utf-8")


def serious_violations(driver: Any) -> list[str]:
    """What axe finds serious or critical on the page now, a line each (rule, impact, the first target and
    why it failed there)."""
    driver.execute_script(source())
    found = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, {resultTypes: ['violations']}).then(r => done(r.violations), e => done([String(e)]));"
    )
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at {v['nodes'][0]['target'] if v['nodes'] else '?'}"
        f" ({v['nodes'][0].get('failureSummary', '') if v['nodes'] else ''})"
        for v in found
        if isinstance(v, dict) and v.get("impact") in ("serious", "critical")
    ] + [str(v) for v in found if not isinstance(v, dict)]
