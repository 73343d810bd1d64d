import tracemalloc

import pytest

from chalicelib.core.errors import RenderFailed, TemplateInvalid
from chalicelib.ingest.renderer import CompiledCampaign, TemplateCache, template_variables


def render(subject, body, metadata=None, strict=False, email="ann@example.org"):
    c = CompiledCampaign("c1", subject, body, strict=strict)
    return c.render(template_variables(email, metadata or {}, "c1"))


def test_metadata_is_at_top_level_as_in_moonmail_templates():
    out = render(
        "Hi {{ name }}",
        "<p>{{ name }} {{ surname }} {{ recipient.email }} {{ campaign.id }}</p>",
        {"name": "Ann", "surname": "Lee"},
    )
    assert out.subject == "Hi Ann"
    assert out.body == "<p>Ann Lee ann@example.org c1</p>"


def test_undefined_variables_render_empty_unless_strict():
    assert render("Hi {{ nobody }}!", "x").subject == "Hi !"
    with pytest.raises(RenderFailed, match=r"subject, line 1, column \d+: 'nobody' is undefined"):
        render("Hi {{ nobody }}!", "x", strict=True)


def test_body_escapes_recipient_data_but_subject_does_not():
    out = render("{{ name }} & co", "<p>{{ name }}</p>", {"name": "<script>x</script> & Tom"})
    assert out.body == "<p>&lt;script&gt;x&lt;/script&gt; &amp; Tom</p>"
    assert out.subject == "<script>x</script> & Tom & co"


def test_line_breaks_in_a_rendered_subject_are_folded_away():
    assert render("Hi {{ name }}", "x", {"name": "Ann\r\nBcc: evil@x.io"}).subject == "Hi Ann Bcc: evil@x.io"


def test_recipient_cannot_override_the_fixed_names():
    out = render("{{ recipient.email }} {{ campaign.id }}", "x", {"recipient": "spoof", "campaign": "spoof"})
    assert out.subject == "ann@example.org c1"


def test_syntax_error_names_the_template_and_where():
    with pytest.raises(TemplateInvalid, match=r"^body, line 2, column 3: unexpected tag 'nosuchtag'"):
        CompiledCampaign("c1", "ok", "<p>\n{% nosuchtag %}</p>", strict=False)
    # python-liquid gives no position for errors at the very end of a tag: the template is named.
    with pytest.raises(TemplateInvalid, match=r"^subject: "):
        CompiledCampaign("c1", "{% if a == %}x{% endif %}", "x", strict=False)


def test_unknown_filter_fails_the_recipient_at_render():
    with pytest.raises(RenderFailed, match="nosuchfilter"):
        render("s", "{{ name | nosuchfilter }}")


@pytest.mark.parametrize(
    "hostile",
    [
        "{% for i in (1..100000000) %}x{% endfor %}",
        "{% for i in (1..5000) %}{% for j in (1..5000) %}x{% endfor %}{% endfor %}",
        "{% for i in (1..3000000) %}xxxxxxxxxx{% endfor %}",
    ],
)
def test_hostile_template_fails_fast_with_a_clear_error(hostile):
    # Stopped by a resource limit (loop iterations or output size), not by the loop running out.
    with pytest.raises(RenderFailed, match="limit"):
        render("s", hostile)


A64K = "{% capture a %}{% for i in (1..60000) %}a{% endfor %}{% endcapture %}"


@pytest.mark.parametrize(
    ("hostile", "reason"),
    [
        ("{{ (1..1000000000) | sum }}", "sum: more than 100,000 items"),
        ("{{ (1..1000000000) | sort | first }}", "sort: more than 100,000 items"),
        ("{{ (1..3000000) | join: ',' }}", "join: more than 100,000 items"),
        (A64K + "{{ a | replace: 'a', a }}", "replace: result too large"),
        # An array on the left is replaced in as its text ("['a', 'a', ...]"): bounded as a string is.
        (
            "{% capture a %}{% for i in (1..5000) %}a{% endfor %}{% endcapture %}"
            "{% capture b %}{% for i in (1..3000) %}a{% endfor %}{% endcapture %}"
            "{% assign arr = b | split: '' %}{{ arr | replace: 'a', a }}",
            "replace: result too large",
        ),
        (A64K + "{{ a | split: '' | join: a }}", "join: result too large"),
        (A64K + "{% for i in (1..90000) %}{{ a }}{% endfor %}", "output too large"),
        ("{% for i in (1..300) %}{% for j in (1..300) %}" + "x" * 50 + "{% endfor %}{% endfor %}", "output too large"),
    ],
)
def test_hostile_template_is_stopped_before_it_builds_its_output(hostile, reason):
    # Each of these once asked python-liquid for gigabytes (its output limit only sees a string once it
    # exists): peak memory while failing shows the limit acted before the allocation, not after.
    tracemalloc.start()
    try:
        with pytest.raises(RenderFailed, match=reason):
            render("s", hostile)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024 * 1024


def test_output_limit_does_not_cut_a_large_but_legitimate_email():
    body = "{% for i in (1..2000) %}<p>Line {{ forloop.index }} for {{ name }}</p>{% endfor %}"
    assert render("s", body, {"name": "Ann"}).body.count("for Ann") == 2000


def test_cache_compiles_a_campaign_once_and_stays_bounded():
    cache = TemplateCache(size=2)
    a = cache.get("c1", "s", "b", strict=False)
    assert cache.get("c1", "s", "b", strict=False) is a
    assert cache.get("c1", "s", "changed", strict=False) is not a  # same id, new template
    cache.get("c2", "s", "b", strict=False)
    cache.get("c3", "s", "b", strict=False)
    assert len(cache) == 2


def test_control_characters_in_a_rendered_subject_are_dropped():
    rendered = render("Hi {{ name }}", "<p>x</p>", {"name": "A\x00n\x1bn\x08\x7f\x0b\x0c!"})
    assert rendered.subject == "Hi Ann !"


def test_a_hash_on_the_left_of_an_array_filter_is_bounded_as_an_array_is():
    big = {f"k{i}": i for i in range(100_001)}  # data, not template: only a caller's variables can be this big
    with pytest.raises(RenderFailed, match="sort: more than 100,000 items"):
        render("s", "{{ h | sort | first }}", {"h": big})
