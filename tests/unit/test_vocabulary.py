"""One vocabulary: each word of the glossary (docs/architecture.md, "Words used one way only") has one
meaning in the code and the docs' prose, and its retired synonyms do not come back.

Each rule is a retired use: a regex, the files it is retired in, and a small allow-list of public names
(API fields, table names, AWS's own words) that keep the old word compatibly, each saying why. A new use
of a retired word fails here with its file, line and the word to use instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# A record of the past, in the words of its day: not rewritten, so not read.
NOT_READ = {"docs/benchmarks-history.md"}


def _files() -> list[str]:
    paths = [*ROOT.glob("chalicelib/**/*.py"), ROOT / "app.py", *ROOT.glob("infra/**/*.py")]
    paths += [*ROOT.glob("infra/**/*.md"), *ROOT.glob("docs/*.md"), ROOT / "README.md"]
    names = sorted({p.relative_to(ROOT).as_posix() for p in paths if p.is_file()})
    return [n for n in names if n not in NOT_READ]


FILES = _files()

# Where "park" would be a webhook request, the runtime's deferral or a dead letter: the files about those.
WEBHOOK_CODE = r"chalicelib/webhooks/|chalicelib/stores/webhook|chalicelib/control/webhook"
WEBHOOK_FILES = re.compile(rf"^({WEBHOOK_CODE}|docs/webhooks\.md)")
WEBHOOK_PY = re.compile(rf"^({WEBHOOK_CODE})")
RUNTIME_FILES = re.compile(r"^infra/local/(lambda_runtime|state|snapshot)")
DEAD_LETTER_FILES = re.compile(r"^chalicelib/jobs/dead_letters\.py")
SEND_PATH_OUTCOMES = "chalicelib/send/outcomes.py"
SEND_PATH_DELIVERY = "chalicelib/send/delivery.py"

# Public names that keep the old word, compatibly. Each is cut out of a line before the rules read it.
ALLOWED: dict[str, str] = {
    r"\bparked\b(?=`|\"|':|\": )": "the webhook listing's API field `parked` (GET /webhooks), kept as it was",
    r"\bparkedIsLowerBound\b": "the webhook listing's API field, kept as it was",
    r"\bparked[-_]deliveries\b": "the held requests' table: its name (moonsend-<stage>-parked-deliveries)",
    r"\bParkedDeliveriesTable\b": "the held requests' table's CloudFormation logical id (renamed: a new table)",
    r"\bParkedDeliveries\b(?=\",)": "the IAM statement id of the held requests' table (a deployed policy's Sid)",
    r"\bparked_at\b": "the held requests' stored attribute name (rows already written keep it)",
    r"\"Delivery\"": "SES's own event type, as SES names it",
    r"recorded cancelled as the sender meets it\"": "`campaign cancel`'s answer (CLI and API), an output kept",
    r"has no sender registered": "DigestNotReady's message, an output word kept (it means the From identity)",
    r"\{job\.done\} parked deliveries done": "`moonsend webhook replay`'s progress line, an output word kept",
}


@dataclass(frozen=True)
class Retired:
    name: str  # the retired use
    pattern: str
    instead: str  # the word to use
    where: re.Pattern[str] | None = None  # the files it is retired in (None: everywhere read)
    except_in: str | None = None  # the one file where the word keeps its one meaning
    flags: int = re.IGNORECASE


RETIRED = [
    Retired(
        "the drainer called the sender",
        # Lower-case "sender" after an article was the drainer; the From identity is written `Sender`.
        r"\b([Tt]he|[Aa]|[Ee]ach|[Ee]very|[Oo]ne|[Nn]o|[Dd]ead|[Ii]ts) sender'?s?\b(?! (identity|settings|address))"
        r"|\bcopy's sender\b|\bsender (invocations?|threads?|containers?|functions?|loop|died|dies)\b",
        "the drainer (a Sender, capitalised, is the From identity only)",
        flags=0,
    ),
    Retired("a webhook request parked", r"\b(un)?park(s|ed|ing)?\b", "held (a held request)", WEBHOOK_FILES),
    Retired(
        "parked deliveries or requests",
        r"\bparked (deliver(y|ies)|requests?|rows?|for replay)\b"
        r"|\b(deliver(y|ies)|requests?) (is |are |were |was )?parked\b",
        "held requests",
    ),
    Retired(
        "ParkedDeliveries, the class",
        r"\bParked(Deliveries|Model)?\b|\bPARKED(_DAYS|_COUNT_\w+)?\b",
        "HeldRequests",
        WEBHOOK_FILES,
        flags=0,
    ),
    Retired("the runtime parking events", r"\b(un)?park(s|ed|ing)?\b", "deferred", RUNTIME_FILES),
    Retired("a dead letter parked", r"\b(un)?park(s|ed|ing)?\b", "dead-lettered", DEAD_LETTER_FILES),
    Retired(
        "a second Delivery class",
        r"^\s*class Delivery\b|^Delivery\s*=",
        "WebhookRequest (webhooks); Delivery is the send path's",
        except_in=SEND_PATH_DELIVERY,
        flags=re.MULTILINE,
    ),
    Retired(
        "a second Outcome type",
        r"^\s*class Outcome\b|^Outcome\s*=",
        "RequestOutcome (webhooks), WriteOutcome (write_batch); Outcome is the send path's",
        except_in=SEND_PATH_OUTCOMES,
        flags=re.MULTILINE,
    ),
    Retired(
        "the webhook Delivery/Outcome",
        r"\b(Delivery|Outcome)\b",
        "WebhookRequest / RequestOutcome",
        WEBHOOK_PY,
        flags=0,
    ),
    Retired("the retry schedule", r"\bretry schedules?\b", "the retry waits"),
    Retired(
        "the schedule, unqualified",
        r"\bthe schedule\b(?![\s-]+store)(?!'s)",
        "the schedule store, or a digest's schedule",
    ),
]


# The glossary's rows name the retired synonyms in their last column, to retire them: that column is not read.
GLOSSARY_RETIRED = re.compile(r"^(\| \*\*[^|]+\*\*[^|]*\|[^|]+\|)[^|]+\|$", re.MULTILINE)


def _text(path: str) -> str:
    text = (ROOT / path).read_text()
    if path == "docs/architecture.md":
        text = GLOSSARY_RETIRED.sub(r"\1", text)
    for allowed in ALLOWED:
        text = re.sub(allowed, "", text)
    return text


def _uses(rule: Retired, path: str) -> list[str]:
    if (rule.where is not None and not rule.where.search(path)) or path == rule.except_in:
        return []
    text = _text(path)
    found = []
    for m in re.finditer(rule.pattern, text, rule.flags):
        line = text.count("\n", 0, m.start()) + 1
        found.append(f"{path}:{line}: {m.group(0)!r} -> {rule.instead}")
    return found


@pytest.mark.parametrize("rule", RETIRED, ids=[r.name for r in RETIRED])
def test_retired_synonym_is_not_used_in_code_or_docs(rule: Retired) -> None:
    found = [use for path in FILES for use in _uses(rule, path)]
    assert found == [], f"{rule.name}: retired, use {rule.instead}\n" + "\n".join(found)


def test_the_glossary_names_every_word_and_its_retired_synonyms() -> None:
    glossary = (ROOT / "docs/architecture.md").read_text().split("Words used one way only", 1)[-1]
    words = ["parked", "held", "deferred", "dead-lettered", "the drainer", "Sender", "WebhookRequest"]
    words += ["RequestOutcome", "WriteOutcome", "schedule store", "retry waits", "send time"]
    for word in words:
        assert word in glossary, f"the glossary does not define {word!r}"


def test_the_rules_read_the_code_and_the_docs() -> None:
    # A rule over no files would pass on anything.
    assert "app.py" in FILES and "docs/architecture.md" in FILES and "README.md" in FILES
    assert any(f.startswith("chalicelib/webhooks/") for f in FILES)
    assert any(f.startswith("infra/local/") for f in FILES)
    assert "docs/benchmarks-history.md" not in FILES


def test_an_allowed_public_name_still_catches_the_retired_word_beside_it() -> None:
    # The allow-list cuts out the public name only: prose beside it is still read.
    rule = next(r for r in RETIRED if r.name == "parked deliveries or requests")
    text = re.sub(r"\bparkedIsLowerBound\b", "", "`parkedIsLowerBound` says the parked requests are more")
    assert re.search(rule.pattern, text, rule.flags)
