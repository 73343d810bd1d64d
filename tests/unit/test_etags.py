"""ETags: the same answer has the same strong tag, another answer another; If-None-Match as RFC 9110 reads it."""

from __future__ import annotations

from chalicelib.api.etags import etag, not_modified


def test_the_same_body_has_the_same_quoted_tag_and_any_change_another():
    a = etag({"campaigns": [{"id": "spring", "sent": 3}], "next": None})
    assert a == etag({"next": None, "campaigns": [{"sent": 3, "id": "spring"}]})  # key order does not matter
    assert a.startswith('"') and a.endswith('"') and len(a) == 34
    assert a != etag({"campaigns": [{"id": "spring", "sent": 4}], "next": None})


def test_if_none_match_matches_its_tag_in_a_list_weakly_or_as_a_star_and_nothing_else():
    tag = etag({"x": 1})
    assert not_modified(tag, tag)
    assert not_modified(f'"other", W/{tag}', tag)
    assert not_modified("*", tag)
    assert not not_modified(None, tag) and not not_modified("", tag)
    assert not not_modified('"other"', tag)
    assert not not_modified(tag.strip('"'), tag)  # an unquoted tag is not the tag


def test_a_body_with_text_no_codec_could_encode_still_has_a_tag():
    assert etag({"q": "\udcff"}) != etag({"q": "x"})
