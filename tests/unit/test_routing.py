import re

from chalicelib.core.resources import resources_for
from chalicelib.core.routing import is_our_queue, queue_for, tenant_queue_name

R = resources_for("moonsend", "local")
SQS_NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}$")


def test_plain_ids_keep_a_readable_queue_name():
    assert tenant_queue_name(R, "acme") == "moonsend-local-t-acme"


def test_crafted_ids_never_share_a_queue():
    long_a = "a" * 70 + "X"
    long_b = "a" * 70 + "Y"
    ids = [
        "acme",
        "ACME",
        "a--b",
        "a-b",
        "a_b",
        "a.b",
        "a|b",
        "a@b",
        "auth0|5f3e9a",
        "auth0-5f3e9a",
        long_a,
        long_b,
        "a" * 63,
        "a" * 64,
        "x" * 128,
        "x" * 127,
        "café",
        "../x",
        "..x",
        "-x",
        "moonsend-local-free",
        "free",
    ]
    names = {i: tenant_queue_name(R, i) for i in ids}
    assert len(set(names.values())) == len(ids)
    for name in names.values():
        assert SQS_NAME.match(name), name
        assert name.startswith(R.tenant_queue_prefix)
        assert is_our_queue(R, name)


def test_ids_that_do_not_fit_get_a_readable_prefix_and_a_hash_never_a_truncation():
    name = tenant_queue_name(R, "auth0|" + "z" * 120)
    assert name.startswith("moonsend-local-t-auth0-zzz")
    assert "--" in name and len(name) <= 80


def test_free_plan_goes_to_the_shared_queue():
    assert queue_for(R, "anyone", "free") == "moonsend-local-free"
    assert queue_for(R, "anyone", "paid") == "moonsend-local-t-anyone"


def test_queues_of_other_apps_or_stages_are_not_ours():
    assert not is_our_queue(R, "moonsend-dev-t-acme")
    assert not is_our_queue(R, "someone-elses-queue")
    assert is_our_queue(R, "moonsend-local-free")
