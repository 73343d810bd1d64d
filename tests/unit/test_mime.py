from email import message_from_bytes
from email.policy import default

from chalicelib.core.contract import CAMPAIGN_HEADER, TENANT_HEADER
from chalicelib.core.mime import OutgoingEmail, build_mime, html_to_text


def _parse(raw: bytes):
    return message_from_bytes(raw, policy=default)


def test_message_is_multipart_alternative_with_text_derived_from_html():
    raw = build_mime(
        OutgoingEmail(
            "news@acme.io",
            "Acme",
            "ann@x.io",
            "Hi",
            '<p>Hi <b>Ann</b></p><a href="https://acme.io/r">Read</a><style>p{}</style>',
            "u1",
            "c1",
        )
    )
    msg = _parse(raw)
    assert msg.get_content_type() == "multipart/alternative"
    text = msg.get_body(("plain",)).get_content()
    html = msg.get_body(("html",)).get_content()
    assert "Hi Ann" in text and "Read (https://acme.io/r)" in text and "p{}" not in text
    assert "<b>Ann</b>" in html


def test_headers_identify_sender_tenant_and_campaign_and_encode_non_ascii():
    raw = build_mime(OutgoingEmail("news@acme.io", "Café Ünïon", "ann@x.io", "Grüße 🎉", "<p>x</p>", "u1", "c1"))
    assert b"Caf\xc3\xa9" not in raw.split(b"\r\n\r\n")[0]  # headers are 7-bit (RFC 2047)
    msg = _parse(raw)
    assert str(msg["From"]) == "Café Ünïon <news@acme.io>"
    assert str(msg["Subject"]) == "Grüße 🎉"
    assert msg["To"] == "ann@x.io"
    assert msg["Message-ID"].endswith("@acme.io>")
    assert msg[TENANT_HEADER] == "u1" and msg[CAMPAIGN_HEADER] == "c1"


def test_html_to_text_keeps_paragraphs_apart():
    assert html_to_text("<p>one</p><p>two</p>") == "one\n\ntwo\n"


def test_html_to_text_drops_comments_scripts_and_head_and_unescapes_entities():
    html = (
        "<html><head><title>T</title><style>.a{}</style></head><body><!-- hidden -->"
        "<script>x()</script><h1>Fish &amp; Chips</h1><p>Tom&#39;s<br>menu</p>"
        "<a href='https://x.io/?a=1&amp;b=2'>Order</a> <a href=\"#top\">Top</a> <a href=mailto:a@x.io>Mail</a>"
        "</body></html>"
    )
    assert html_to_text(html) == "Fish & Chips\n\nTom's\nmenu\nOrder (https://x.io/?a=1&b=2) Top Mail\n"


def test_the_boundary_never_occurs_in_the_quoted_printable_parts():
    body = "<p>a=_ms_ and =_ and --=_ms_x</p>"
    raw = build_mime(OutgoingEmail("news@acme.io", "Acme", "ann@x.io", "Hi", body, "u1", "c1"))
    msg = _parse(raw)
    boundary = msg.get_boundary()
    assert boundary.startswith("=_ms_")
    assert raw.count(boundary.encode()) == 4  # the header's parameter, then opening, between the parts, closing
    assert msg.get_body(("html",)).get_content() == body


def _strict(raw: bytes):
    """Python's strict policy raises on any defect it finds (an independent reading of the RFCs)."""
    from email.policy import strict

    return message_from_bytes(raw, policy=strict)


def _encoded_words(raw: bytes) -> list[bytes]:
    import re

    return re.findall(rb"=\?[^?\s]+\?[bBqQ]\?[^?\s]*\?=", raw.split(b"\r\n\r\n")[0])


def test_a_long_non_ascii_sender_name_is_encoded_words_of_at_most_75_characters():
    name = "Ünïcödé Nëws Dëpärtmënt of the Grand Acmé Corporation, Zürich"  # ~70 bytes of UTF-8
    raw = build_mime(OutgoingEmail("news@acme.io", name, "ann@x.io", "Hi", "<p>x</p>", "u1", "c1"))
    words = _encoded_words(raw)
    assert len(words) >= 2 and all(len(w) <= 75 for w in words)  # RFC 2047 §2
    msg = _strict(raw)
    assert msg["From"].addresses[0].addr_spec == "news@acme.io"
    assert " ".join(msg["From"].addresses[0].display_name.split()) == name


def test_a_subject_without_white_space_keeps_every_header_line_within_998_characters():
    subject = "x" * 2000
    raw = build_mime(OutgoingEmail("news@acme.io", "Acme", "ann@x.io", subject, "<p>x</p>", "u1", "c1"))
    head = raw.split(b"\r\n\r\n")[0]
    assert max(len(line) for line in head.split(b"\r\n")) <= 998  # RFC 5322 §2.1.1
    assert all(len(w) <= 75 for w in _encoded_words(raw))
    assert str(_strict(raw)["Subject"]) == subject


def test_every_campaign_email_has_a_list_id_that_is_a_dot_atom():
    import re

    raw = build_mime(OutgoingEmail("news@acme.io", "Acme", "ann@x.io", "Hi", "<p>x</p>", "acme", "spring|2026:sale"))
    list_id = _strict(raw)["List-Id"]
    atext = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
    assert re.fullmatch(rf"<{atext}(\.{atext})*>", str(list_id))  # RFC 2919 §3
    assert str(list_id) == "<spring|2026-sale.acme.acme.io>"


def test_an_ascii_sender_name_that_looks_like_encoded_words_is_shown_as_written():
    name = "=?utf-8?q?A=1B=5B2J=E2=80=AEB?="  # would decode to ESC and a right-to-left override
    raw = build_mime(OutgoingEmail("news@acme.io", name, "ann@x.io", "Hi", "<p>x</p>", "u1", "c1"))
    assert _strict(raw)["From"].addresses[0].display_name == name


def test_the_text_part_leaves_out_declarations_and_stays_fast_on_an_unclosed_tag_name():
    assert html_to_text("<!DOCTYPE html><html><body><p>Hello</p></body></html>") == "Hello\n"
    assert html_to_text('<![if !mso]><p>x</p><![endif]><?xml version="1.0"?>') == "x\n"
    assert html_to_text("<" + "a" * 200_000) == "<" + "a" * 200_000 + "\n"  # unclosed: text; took minutes


def test_the_longest_ids_shorten_the_list_id_and_never_its_domain():
    import re

    domain = "mail." + "d" * 60 + ".example"
    user, campaign = "u" * 128, "c" * 128  # the longest ids the contract accepts
    raw = build_mime(OutgoingEmail(f"news@{domain}", "A", "ann@x.io", "Hi", "<p>x</p>", user, campaign))
    list_id = str(_strict(raw)["List-Id"])
    assert list_id.endswith(f".{domain}>") and len(list_id) <= 255
    assert all(len(label) <= 63 for label in list_id.strip("<>").split("."))
    assert re.fullmatch(r"<[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*>", list_id)
