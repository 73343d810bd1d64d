r"""An id or an address followed by a line end is neither: `re.match` with `$` matches before a final `\n`.

Checked with `^...$` and `.match`, `acme\n` was an id and `ann@example.org\n` an address: a producer's
message for `ann@example.org` and `ann@example.org\n` made two recipients of one campaign (two ledger
records, two sends if SES reads both as the same address), and the second was looked up on the suppression
list under a key no entry has. Found by the review of issue 41; every
anchored pattern of chalicelib ends in `\Z` now."""

from __future__ import annotations

import pytest

from chalicelib.core.fields import is_email, is_id
from chalicelib.core.message_parser import parse_precompile_message
from tests.conftest import canonical


@pytest.mark.parametrize("value", ["acme\n", "spring-sale\n"])
def test_an_id_with_a_final_line_end_is_not_an_id(value: str) -> None:
    assert not is_id(value)


def test_an_address_with_a_final_line_end_is_not_an_address() -> None:
    assert not is_email("ann@example.org\n")


def test_a_recipient_given_twice_once_with_a_line_end_is_one_recipient_and_one_rejection() -> None:
    message = canonical()
    message.pop("recipient", None)
    message["recipients"] = [{"email": "ann@example.org\n"}, {"email": "ann@example.org"}]
    request = parse_precompile_message(message)
    assert [r.email for r in request.recipients] == ["ann@example.org"]
    assert len(request.rejected) == 1
