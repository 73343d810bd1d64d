"""Property tests of the message contract and the Liquid path: hostile input never crashes, always ends recorded.

Hypothesis builds PrecompileEmail messages from the canonical one with any field replaced by any JSON
value, hostile strings (lone surrogates, NULs, very long ids, values at and past AWS's limits, code points
SQS refuses), recipients in both forms, and templates
made of Liquid fragments that are unbalanced, recursive, filter-heavy or huge. For every message,
precompile_email must return (never raise), record something for it in the ledger, queue only valid
JSON under SQS's size limit with no credentials, and do nothing more when the same message comes again.

The examples are derandomized (CI sees the same ones every run); `HYPOTHESIS_PROFILE=deep` runs ten
times as many, freshly random, for a longer hunt.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chalicelib.core.config import Settings
from chalicelib.core.errors import RenderFailed, TemplateInvalid
from chalicelib.ingest.precompile import Precompiler
from chalicelib.ingest.renderer import TemplateCache
from chalicelib.stores.ledger_model import REJECTED, STATES
from tests.conftest import canonical
from tests.fakes import FakeLedger, FakeSqs, parts

settings.register_profile(
    "ci", max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("deep", max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

SQS_MAX_BYTES = 256 * 1024

# At and past AWS's limits (DynamoDB's keys: 1,024 bytes sorted, 2,048 partition; counted in UTF-8, so a
# multibyte string is over in fewer characters), and code points SQS refuses in a message (U+FFFE, U+FFFF,
# C0 controls but tab, line feed and carriage return).
AT_AWS_LIMITS = [
    "a" * 1024,
    "a" * 1025,
    "é" * 512,
    "é" * 513,
    "a" * 2048,
    "a" * 2049,
    "€" * 700,
    "\uffff",
    "\ufffe",
    "a\uffffb",
    "\x01",
    "\x1f\x7f",
    "\U0010ffff",
]
HOSTILE_TEXT = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        ["", " ", "\x00", "\ud800", "../../etc", "a" * 300, "é" * 70, "<script>", "{{", "%}", "null", "1e309"]
    ),
    st.sampled_from(AT_AWS_LIMITS),
)
# Numbers and number-like text that make numeric filters raise (OverflowError, decimal's InvalidOperation).
HOSTILE_NUMBERS = st.one_of(
    st.sampled_from(["1e999", "-1e999", "1e-999", "nan", "NaN", "inf", "-inf", "n/a", "0", "0.0", "1" * 400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**400), max_value=10**400),
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | HOSTILE_TEXT | HOSTILE_NUMBERS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(HOSTILE_TEXT, inner, max_size=4),
    max_leaves=12,
)
LIQUID_FRAGMENTS = [
    "Hi ",
    "{{ name }}",
    "{{ name | upcase | truncate: 3 }}",
    "{{ recipient.email }}",
    "{{ campaign.id }}",
    "{{ nosuch.deep.path }}",
    "{% if name %}",
    "{% else %}",
    "{% endif %}",
    "{% for i in (1..100000) %}",
    "{% for t in interests %}",
    "{% endfor %}",
    "{% assign a = name | append: name %}",
    "{{ a | replace: 'A', a }}",
    "{{ name | split: '' | join: name }}",
    "{{ (1..1000000000) | sum }}",
    "{% capture c %}",
    "{% endcapture %}",
    "{% include 'other' %}",
    "{% render 'x' %}",
    "{% raw %}",
    "{% endraw %}",
    "{% nosuchtag %}",
    "{{",
    "}}",
    "{%",
    "%}",
    "{{ 1 | divided_by: 0 }}",
    "{{ name | ceil }}",
    "{{ name | floor }}",
    "{{ name | round: 2 }}",
    "{{ name | abs }}",
    "{{ name | modulo: 0.0 }}",
    "{{ name | divided_by: 0.0 }}",
    "{{ name | times: name }}",
    "{{ name | plus: 1e308 }}",
    "{{ interests | sum }}",
    "{{ interests | sort | first }}",
    "{{ interests | sort_natural | last }}",
    "{{ interests | map: 'x' | compact | uniq | join: ',' }}",
    "{{ name | date: '%Y' }}",
    "\x00",
    "\ud800",
]
STRING_TEMPLATES = st.lists(st.sampled_from(LIQUID_FRAGMENTS), max_size=12).map("".join) | HOSTILE_TEXT
TEMPLATES = STRING_TEMPLATES | JSON_VALUES
METADATA = st.one_of(
    st.dictionaries(
        st.sampled_from(["name", "surname", "interests", "a", "c"]) | HOSTILE_TEXT, JSON_VALUES, max_size=5
    ),
    JSON_VALUES,
)
EMAILS = st.one_of(
    st.sampled_from(["ann@example.org", "ANN@example.org", "bo@example.org", "bad", "a@b", "x@y.example"]),
    st.sampled_from(  # addresses too long to be a key, in bytes or in characters, and one SQS refuses
        [
            "a" * 1090 + "@x.example",
            "é" * 600 + "@example.org",
            "a" * 64 + "@" + "b" * 250 + ".example",
            "a\uffff@b.example",
        ]
    ),
    st.emails().map(str),
    JSON_VALUES,
)
RECIPIENT = st.fixed_dictionaries({"email": EMAILS, "metadata": METADATA}) | JSON_VALUES


@st.composite
def messages(draw: st.DrawFn) -> str:
    """A PrecompileEmail message: canonical, then bent out of shape at random."""
    msg: dict[str, Any] = canonical()
    msg["campaign"]["subject"] = draw(TEMPLATES)
    msg["campaign"]["body"] = draw(TEMPLATES)
    if draw(st.booleans()):
        del msg["recipient"]
        msg["recipients"] = draw(st.lists(RECIPIENT, max_size=6) | JSON_VALUES)
    else:
        msg["recipient"] = draw(RECIPIENT)
    for _ in range(draw(st.integers(0, 3))):
        section = draw(st.sampled_from([None, "sender", "campaign"]))
        target = msg if section is None else msg[section]
        if not isinstance(target, dict):
            continue
        key = draw(st.sampled_from([*sorted(target), "userPlan", "scheduledAt", "expiresAfter", "strict", "x"]))
        target[key] = draw(JSON_VALUES)
    shape = draw(st.sampled_from(["json", "json", "json", "text", "truncated", "deep"]))
    raw = json.dumps(msg)
    if shape == "deep":  # nested past what any parser or walker can follow, somewhere in the message
        depth = draw(st.sampled_from([40, 900, 3000]))
        at = draw(st.sampled_from(['"metadata": ', '"campaign": ', '"userId": ']))
        return raw.replace(at, f'{at}{"[" * depth}1{"]" * depth}, "_": ', 1)
    if shape == "text":
        return draw(HOSTILE_TEXT)
    if shape == "truncated":
        return raw[: draw(st.integers(0, len(raw)))]
    return raw


def _precompiler() -> tuple[Precompiler, FakeSqs, FakeLedger]:
    sqs, ledger = FakeSqs(), FakeLedger()
    return parts.precompiler(Settings.from_env({"MOONSEND_STAGE": "test"}), sqs, ledger=ledger), sqs, ledger


@given(messages())
def test_any_message_returns_and_leaves_a_record_in_the_ledger(raw: str) -> None:
    p, sqs, ledger = _precompiler()
    result = p.handle(raw)
    outcomes = (
        result.queued
        + result.scheduled
        + result.expired
        + result.duplicates
        + len(result.rejected)
        + len(result.suppressed)
    )
    assert outcomes >= 1, "a message that produced no outcome at all"
    assert ledger.rows, "nothing recorded for this message"
    for row in ledger.rows.values():
        assert row.get("state") in STATES, row
        if row["state"] == REJECTED:
            assert isinstance(row.get("reason"), str) and row["reason"].strip(), row
    queued = [json.loads(e["MessageBody"]) for _url, entries in sqs.batches for e in entries]
    assert len(queued) == result.queued
    for _url, entries in sqs.batches:
        for e in entries:
            assert len(e["MessageBody"].encode("utf-8")) <= SQS_MAX_BYTES
            assert "apiSecret" not in e["MessageBody"] and "secret/EXAMPLE+key" not in e["MessageBody"]


@given(messages())
def test_the_same_message_again_queues_and_records_nothing_new(raw: str) -> None:
    p, sqs, ledger = _precompiler()
    p.handle(raw)
    rows = {k: dict(v) for k, v in ledger.rows.items()}
    sent_before = sum(len(entries) for _url, entries in sqs.batches)
    again = p.handle(raw)
    assert sum(len(entries) for _url, entries in sqs.batches) == sent_before
    assert again.queued == 0 and again.scheduled == 0
    assert {k: v.get("state") for k, v in ledger.rows.items()} == {k: v.get("state") for k, v in rows.items()}


@given(STRING_TEMPLATES, STRING_TEMPLATES, METADATA)
def test_rendering_raises_only_the_two_documented_errors(subject: str, body: str, metadata: Any) -> None:
    cache = TemplateCache()
    try:
        compiled = cache.get("fuzz", subject, body, strict=False)
    except TemplateInvalid:
        return
    variables = metadata if isinstance(metadata, dict) else {}
    with contextlib.suppress(RenderFailed):  # the one error rendering may raise: recorded as the reason
        compiled.render({**variables, "recipient": {"email": "ann@example.org"}, "campaign": {"id": "fuzz"}})


# What the fuzzing found, kept as plain examples.


def test_a_lone_surrogate_anywhere_rejects_the_message_with_its_path_instead_of_crashing() -> None:
    p, sqs, ledger = _precompiler()
    msg = canonical()
    msg["recipient"]["metadata"]["name"] = "\ud800"
    result = p.handle(json.dumps(msg))
    assert result.queued == 0 and sqs.batches == []
    assert result.rejected[0].reason == "recipient.metadata.name: not valid Unicode (a lone UTF-16 surrogate)"
    assert [row["state"] for row in ledger.rows.values()] == [REJECTED]


def test_an_emoji_escaped_as_a_surrogate_pair_is_valid_text() -> None:
    p, sqs, _ledger = _precompiler()
    msg = canonical()
    msg["recipient"]["metadata"]["name"] = "Ann \U0001f600"
    result = p.handle(json.dumps(msg))  # json.dumps writes the emoji as "\ud83d\ude00"
    assert result.queued == 1
    assert json.loads(sqs.batches[0][1][0]["MessageBody"])["campaign"]["subject"] == "Hello Ann \U0001f600"


def test_a_recipient_entry_with_no_address_is_recorded_under_the_message_and_only_once() -> None:
    p, _sqs, ledger = _precompiler()
    msg = canonical()
    del msg["recipient"]
    # The second "ann" is rejected the first time and a known address the second (found by hypothesis: the
    # key of the entry after it must not depend on what was filtered before it).
    msg["recipients"] = [
        {"email": "ann@example.org", "metadata": {"name": "Ann"}},
        {"email": "ann@example.org", "metadata": []},
        [],
    ]
    raw = json.dumps(msg)
    first = p.handle(raw)
    assert first.queued == 1 and [r.reason for r in first.rejected] == [
        "recipients[1].metadata: must be an object",
        "recipients[2]: must be an object",
    ]
    rows = {k[1]: v for k, v in ledger.rows.items()}
    unkeyed = [k for k in rows if k.startswith("message-")]
    assert len(unkeyed) == 1 and rows[unkeyed[0]]["reason"] == "recipients[2]: must be an object"
    p.handle(raw)
    assert len(ledger.rows) == 2
