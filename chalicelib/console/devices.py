"""A browser's User-Agent said in a few words ("Firefox on Windows"), for the list of a tenant's sessions.

Only what tells a person's own browsers apart at a glance: the full text is kept beside it. A User-Agent is
the client's to write, so an unknown one is said as "a browser", and no part of it is trusted.
"""

from __future__ import annotations

# In the order they are looked for: Edge and Opera say "Chrome" too, Chrome says "Safari".
BROWSERS = (
    ("Edg/", "Edge"),
    ("OPR/", "Opera"),
    ("Firefox/", "Firefox"),
    ("Chromium/", "Chromium"),
    ("Chrome/", "Chrome"),
    ("Safari/", "Safari"),
    ("curl/", "curl"),
    ("python-requests/", "Python"),
    ("Python-urllib/", "Python"),
)
SYSTEMS = (
    ("Android", "Android"),
    ("iPhone", "iPhone"),
    ("iPad", "iPad"),
    ("Windows", "Windows"),
    ("Mac OS X", "macOS"),
    ("CrOS", "ChromeOS"),
    ("Linux", "Linux"),
)


def described(agent: str | None) -> str:
    text = agent or ""
    browser = next((name for mark, name in BROWSERS if mark in text), "a browser")
    system = next((name for mark, name in SYSTEMS if mark in text), None)
    return f"{browser} on {system}" if system else browser
