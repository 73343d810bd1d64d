import base64
import json
import zlib

import pytest

from chalicelib.core.contract import (
    MAX_ADDRESS_LENGTH,
    MAX_ID_LENGTH,
    MAX_INFLATED_BYTES,
    MAX_PARTITION_KEY_BYTES,
    MAX_SORT_KEY_BYTES,
    MIME,
    QueuedEmail,
    RejectedRecipient,
)
from chalicelib.core.digest_contract import MAX_DIGEST_ID_LENGTH
from chalicelib.core.errors import MessageInvalid
from chalicelib.core.fields import is_email, is_id, parse_rate
from chalicelib.core.message_parser import parse_precompile_message
from chalicelib.digest.assembly import campaign_id
from chalicelib.ingest.rejection import record_key, rejection_records
from chalicelib.stores.ledger_model import message_key, pk_of
from tests.conftest import canonical


def test_canonical_moonmail_message_is_accepted_as_is():
    req = parse_precompile_message(json.dumps(canonical()))
    assert req.user_id == "user-1"
    assert req.plan == "paid"
    assert req.sender.rate_per_second == 5.0
    assert req.campaign.id == "camp-1"
    assert [r.email for r in req.recipients] == ["ann@example.org"]
    assert req.recipients[0].metadata == {"name": "Ann", "surname": "Lee"}
    assert req.rejected == []


@pytest.mark.parametrize(("given", "expected"), [("5", 5.0), (" 2.5 ", 2.5), (14, 14.0), (0.5, 0.5)])
def test_rate_per_second_accepts_strings_and_numbers(given, expected):
    assert parse_rate(given) == expected


def test_batched_form_takes_many_recipients_and_rejects_only_the_bad_ones():
    msg = canonical()
    del msg["recipient"]
    msg["recipients"] = [
        {"email": "a@example.org", "metadata": {"name": "A"}},
        {"email": "not an address"},
        {"metadata": {"name": "nobody"}},
        "just a string",
        {"email": "A@EXAMPLE.ORG"},  # the same recipient as the first, in another case
        {"email": "b@example.org", "metadata": ["not", "an", "object"]},
        {"email": "c@example.org"},
    ]
    req = parse_precompile_message(msg)
    assert [r.email for r in req.recipients] == ["a@example.org", "c@example.org"]
    assert [r.reason for r in req.rejected] == [
        "recipients[1].email: not an email address",
        "recipients[2].email: is required",
        "recipients[3]: must be an object",
        "recipients[5].metadata: must be an object",
    ]


def test_sender_without_keys_or_free_plan_goes_to_the_free_plan():
    no_keys = canonical()
    del no_keys["sender"]["apiKey"]
    del no_keys["sender"]["apiSecret"]
    assert parse_precompile_message(no_keys).plan == "free"
    assert parse_precompile_message(canonical(userPlan="free")).plan == "free"


def _with(path: str, value: object) -> dict:
    msg = canonical()
    *parents, last = path.split(".")
    node = msg
    for p in parents:
        node = node[p]
    if value is _DELETE:
        del node[last]
    else:
        node[last] = value
    return msg


_DELETE = object()

BAD_MESSAGES = [
    ("not json", "{nope", "message: not valid JSON"),
    ("a list", "[1, 2]", "message: must be a JSON object"),
    ("no user", _with("userId", _DELETE), "userId: is required"),
    ("user path traversal", _with("userId", "../x"), "userId: may only hold"),
    ("user too long", _with("userId", "u" * 300), "userId: longer than 128 characters"),
    ("user non-ascii", _with("userId", "usér"), "userId: may only hold"),
    ("user not a string", _with("userId", 42), "userId: must be a string"),
    ("bad plan", canonical(userPlan="gold"), "userPlan: must be one of free, paid"),
    ("no sender", _with("sender", _DELETE), "sender: is required"),
    ("sender not object", _with("sender", "x"), "sender: must be an object"),
    ("bad from", _with("sender.emailAddress", "nobody"), "sender.emailAddress: not an email address"),
    ("rate zero", _with("sender.ratePerSecond", "0"), "sender.ratePerSecond: must be greater than zero"),
    ("rate negative", _with("sender.ratePerSecond", -3), "sender.ratePerSecond: must be greater than zero"),
    ("rate word", _with("sender.ratePerSecond", "fast"), "sender.ratePerSecond: not a number"),
    ("rate nan", _with("sender.ratePerSecond", "nan"), "sender.ratePerSecond: not a finite number"),
    ("rate bool", _with("sender.ratePerSecond", True), "sender.ratePerSecond: not a number"),
    ("rate missing", _with("sender.ratePerSecond", _DELETE), "sender.ratePerSecond: is required"),
    ("key without secret", _with("sender.apiSecret", _DELETE), "sender.apiKey: apiKey and apiSecret go"),
    ("bad region", _with("sender.region", "mars-1"), "sender.region: not an AWS region"),
    ("header injection", _with("sender.fromName", "A\r\nBcc: x@y.z"), "sender.fromName: must not contain"),
    (
        "control characters in a header",
        _with("sender.fromName", "Acme\x1b[2J\x00\x7f"),
        "sender.fromName: must not contain control characters",
    ),
    ("no campaign id", _with("campaign.id", _DELETE), "campaign.id: is required"),
    ("no subject", _with("campaign.subject", _DELETE), "campaign.subject: is required"),
    ("body not text", _with("campaign.body", {"html": 1}), "campaign.body: must be a string"),
    ("body too big", _with("campaign.body", "x" * (256 * 1024 + 1)), "campaign.body: larger than the limit"),
    ("strict not bool", _with("campaign.strict", "yes"), "campaign.strict: must be true or false"),
    ("no recipient", _with("recipient", _DELETE), "recipient: is required"),
    (
        "empty batch",
        {**_with("recipient", _DELETE), "recipients": []},
        "recipients: must be a non-empty list",
    ),
    ("both forms", {**canonical(), "recipients": [{"email": "a@b.co"}]}, "recipients: give either"),
]


@pytest.mark.parametrize(("raw", "expected"), [(b[1], b[2]) for b in BAD_MESSAGES], ids=[b[0] for b in BAD_MESSAGES])
def test_bad_message_is_rejected_with_the_field_and_the_reason(raw, expected):
    with pytest.raises(MessageInvalid) as err:
        parse_precompile_message(raw if isinstance(raw, str) else json.dumps(raw))
    assert expected in str(err.value)


def test_every_envelope_problem_is_reported_at_once():
    msg = canonical(userId="../x")
    msg["sender"]["ratePerSecond"] = "0"
    msg["campaign"]["subject"] = ""
    with pytest.raises(MessageInvalid) as err:
        parse_precompile_message(msg)
    assert [e.path for e in err.value.errors] == ["userId", "sender.ratePerSecond", "campaign.subject"]


def test_only_the_recipient_whose_metadata_is_too_large_is_rejected_among_many():
    # Metadata is measured a group at a time and one by one only when a group is over the limit: a
    # group of 40 whose total is over 16 KiB (400 bytes each) keeps every member; one of them at 17 KiB
    # is the only one rejected, wherever it is in its group.
    msg = canonical()
    del msg["recipient"]
    msg["recipients"] = [{"email": f"r{i}@example.org", "metadata": {"note": "x" * 400}} for i in range(40)]
    msg["recipients"][33]["metadata"] = {"note": "y" * (17 * 1024)}
    req = parse_precompile_message(msg)
    assert len(req.recipients) == 39
    assert "r33@example.org" not in [r.email for r in req.recipients]
    assert [(r.email, r.reason) for r in req.rejected] == [
        ("r33@example.org", "recipients[33].metadata: larger than 16384 bytes")
    ]


def test_a_single_recipient_with_too_large_metadata_is_rejected_under_its_name():
    msg = canonical()
    msg["recipient"]["metadata"] = {"note": "z" * (17 * 1024)}
    req = parse_precompile_message(msg)
    assert req.recipients == []
    assert [r.reason for r in req.rejected] == ["recipient.metadata: larger than 16384 bytes"]


def test_invalid_single_recipient_is_rejected_not_raised():
    req = parse_precompile_message(_with("recipient.email", "nope"))
    assert req.recipients == []
    assert req.rejected[0].reason == "recipient.email: not an email address"


def test_sender_keys_never_show_in_repr_or_in_the_queued_message():
    req = parse_precompile_message(canonical())
    assert "secret/EXAMPLE+key" not in repr(req)
    assert "AKIAEXAMPLE" not in repr(req.sender)
    queued = QueuedEmail("user-1", "paid", req.sender.public_dict(), "camp-1", "s", "b", "ann@example.org")
    text = queued.to_json()
    assert "secret/EXAMPLE+key" not in text and "AKIAEXAMPLE" not in text
    assert QueuedEmail.from_json(text) == queued


@pytest.mark.parametrize("text", ["plain", 'quote " and \\ backslash', "é ü 日本", "line\nbreak\x00\u2028", ""])
def test_queued_json_is_what_json_dumps_gives_for_any_text(text):
    # The encoder joins a pre-encoded envelope with escaped strings; it must match the json module exactly.
    queued = QueuedEmail(f"u{text}", "paid", {"fromName": text, "rate": 1.5}, f"c{text}", text, text, "a@x.io")
    expected = json.dumps(
        {
            "userId": queued.user_id,
            "userPlan": "paid",
            "sender": queued.sender,
            "campaign": {"id": queued.campaign_id, "subject": text, "body": text},
            "recipient": {"email": "a@x.io"},
        },
        separators=(",", ":"),
        ensure_ascii=False,
    )
    assert queued.to_json() == expected
    assert QueuedEmail.from_json(queued.to_json()) == queued


def test_queued_message_keeps_the_canonical_shape_without_metadata():
    queued = QueuedEmail("u", "paid", {"emailAddress": "n@x.io"}, "c", "Hi Ann", "<p>Ann</p>", "ann@x.io")
    d = json.loads(queued.to_json())
    assert d["campaign"] == {"id": "c", "subject": "Hi Ann", "body": "<p>Ann</p>"}
    assert d["recipient"] == {"email": "ann@x.io"}
    assert d["userId"] == "u"


def test_a_composed_queued_email_carries_its_message_packed_in_place_of_the_body_and_reads_back_the_same():
    composed = "To: a@x.io\r\n\r\n" + "x" * 10_000
    queued = QueuedEmail("u", "paid", {"emailAddress": "n@x.io"}, "c", "Hi", None, "ann@x.io", mime=composed)
    d = json.loads(queued.to_json())
    assert set(d["campaign"]) == {"id", "subject", MIME} and len(d["campaign"][MIME]) < 200  # deflated
    assert zlib.decompress(base64.b64decode(d["campaign"][MIME])).decode() == composed  # zlib, base64: no secret
    assert QueuedEmail.from_json(queued.to_json()) == queued


@pytest.mark.parametrize(
    "raw",
    ['{"userId": "u", "campaign": "c"}', '{"userId": "u", "campaign": []}', "[" * 100_000 + "]" * 100_000, "[]"],
)
def test_a_queued_message_of_the_wrong_shape_or_depth_is_unreadable_not_raised(raw):
    with pytest.raises(MessageInvalid, match="not a queued email"):
        QueuedEmail.from_json(raw)


def _with_mime(packed):
    campaign = {"id": "c", "subject": "s"} if packed is ... else {"id": "c", "subject": "s", MIME: packed}
    return json.dumps({"userId": "u", "sender": {}, "campaign": campaign, "recipient": {"email": "a@x.io"}})


@pytest.mark.parametrize(
    "packed",
    [
        ...,  # neither a message nor a body
        42,
        None,
        "not base64!",
        base64.b64encode(b"not zlib").decode(),
        base64.b64encode(zlib.compress(b"x" * 1000)[:-6]).decode(),  # cut short
        base64.b64encode(zlib.compress("Grüße".encode())).decode(),  # not 7-bit: not ours
        base64.b64encode(zlib.compress(b"\0" * (MAX_INFLATED_BYTES + 1), 9)).decode(),  # a bomb: 48 KB of it
    ],
)
def test_a_queued_email_whose_message_is_not_one_we_packed_is_unreadable_not_raised(packed):
    with pytest.raises(MessageInvalid, match="not a queued email"):
        QueuedEmail.from_json(_with_mime(packed))


def test_a_c1_control_character_in_the_sender_name_is_refused():
    msg = canonical()
    msg["sender"]["fromName"] = "Acme\x9b31m"
    with pytest.raises(MessageInvalid, match=r"sender\.fromName: must not contain control characters"):
        parse_precompile_message(json.dumps(msg))


def test_an_address_longer_than_any_address_is_rejected_saying_so():
    req = parse_precompile_message(_with("recipient.email", "a" * 1090 + "@x.example"))
    assert req.rejected[0].reason == "recipient.email: not an email address (longer than 254 characters: 1,100)"
    assert (
        parse_precompile_message(_with("recipient.email", "a" * 255))
        .rejected[0]
        .reason.endswith("(longer than 254 characters: 255)")
    )


@pytest.mark.parametrize(
    ("email", "own"),
    [
        ("not an address", True),
        ("x" * 254, True),
        ("x" * 255, False),
        ("a" * 1090 + "@x.example", False),
        ("é" * 200, False),  # 200 characters, 400 bytes
        ("😀" * 50_000, False),
        ("İ" * 5000, False),  # lower-cases to two characters each
    ],
)
def test_a_rejected_address_is_recorded_under_a_key_that_fits_the_ledger_and_is_the_same_for_every_copy(email, own):
    key = record_key(email)
    assert key is not None and key == record_key(email)
    assert len(key.lower().encode()) <= MAX_SORT_KEY_BYTES
    assert (key == email) is own
    if not own:
        assert key.startswith(email[:64] + f"... ({len(email.encode()):,} bytes, sha256 ")
        assert key != record_key(email + "x")


@pytest.mark.parametrize("email", [None, "", "tab\there", "nul\x00", "line\nbreak" * 200])
def test_an_address_with_no_key_of_its_own_is_recorded_under_the_messages_digest_and_its_place(email):
    assert record_key(email) is None
    (record,) = rejection_records([RejectedRecipient(email, "recipients[2].email: not an email address")], "{}")
    assert record[0] == f"{message_key('{}')}-recipients[2].email"


def test_the_keys_composed_of_the_longest_ids_and_addresses_fit_dynamodbs_key_sizes():
    """Ids are at most 128 ASCII characters and addresses 254: every key made of them stays under DynamoDB's
    2,048 bytes (partition) and 1,024 (sort), composite ones included."""
    user, campaign, digest = "u" * MAX_ID_LENGTH, "c" * MAX_ID_LENGTH, "d" * MAX_DIGEST_ID_LENGTH
    address = "a" * 64 + "@" + "b" * 63 + "." + "c" * 63 + "." + "d" * 58 + ".co"
    assert len(address) == MAX_ADDRESS_LENGTH
    assert is_id(user) and is_id(campaign_id(digest, "20261125T1300Z")) and is_email(address)
    partition = [pk_of(user, campaign), pk_of(user, campaign_id(digest, "20261125T1300Z")), f"i#{user}#{digest}#15"]
    sort = [address.lower(), f"{address}#{'i' * MAX_ID_LENGTH}", f"{user}#{campaign}#{'0' * 64}"]
    assert max(len(k.encode()) for k in partition) <= MAX_PARTITION_KEY_BYTES
    assert max(len(k.encode()) for k in sort) <= MAX_SORT_KEY_BYTES
    assert not is_id("x" * (MAX_ID_LENGTH + 1)) and not is_id("") and not is_id("_unattributed") and not is_id(None)
