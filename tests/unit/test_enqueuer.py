"""SendMessageBatch's answers, as AWS documents them, read entry by entry (chalicelib.queueing.enqueuer)."""

from __future__ import annotations

from typing import Any

from chalicelib.queueing.enqueuer import ATTEMPTS, Enqueuer, Outgoing


class AnsweringSqs:
    """Answers each SendMessageBatch with what `answer` makes of its entries, in SQS's response shape:
    `Successful` entries carry Id, MessageId and MD5OfMessageBody; `Failed` ones Id, SenderFault, Code and
    Message (SQS API reference, SendMessageBatch)."""

    def __init__(self, answer: Any) -> None:
        self._answer = answer
        self.calls: list[list[str]] = []

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        ids = [e["Id"] for e in Entries]
        self.calls.append(ids)
        ok, failed = self._answer(len(self.calls), Entries)
        return {
            "Successful": [{"Id": e["Id"], "MessageId": f"m-{e['Id']}", "MD5OfMessageBody": "x"} for e in ok],
            "Failed": [
                {"Id": e["Id"], "SenderFault": fault, "Code": code, "Message": code} for e, fault, code in failed
            ],
        }


def _three() -> list[Outgoing]:
    return [Outgoing(f"r{i}@example.org", f"body {i}") for i in range(3)]


def test_an_entry_the_answer_leaves_out_is_sent_again_and_not_taken_for_queued():
    def answer(call: int, entries: list[dict[str, Any]]):
        if call == 1:
            return entries[:2], []  # the third entry is in neither list
        return entries, []

    sqs = AnsweringSqs(answer)
    failures = Enqueuer(sqs, sleep=lambda _s: None).send("url", _three())
    assert failures == []
    assert sqs.calls == [["0", "1", "2"], ["2"]]


def test_an_entry_never_listed_is_returned_as_failed_with_the_reason():
    sqs = AnsweringSqs(lambda _call, entries: ([e for e in entries if e["Id"] != "1"], []))
    failures = Enqueuer(sqs, sleep=lambda _s: None).send("url", _three())
    assert [(f.key, f.reason) for f in failures] == [("r1@example.org", "SQS's answer did not list this entry")]
    assert len(sqs.calls) == ATTEMPTS


def test_a_failure_of_the_senders_own_making_is_not_retried_and_a_transient_one_is():
    def answer(call: int, entries: list[dict[str, Any]]):
        by_id = {e["Id"]: e for e in entries}
        failed = [(by_id["0"], True, "InvalidMessageContents")] if "0" in by_id else []
        if call == 1:
            failed.append((by_id["1"], False, "InternalError"))
        return [e for e in entries if e["Id"] not in {f[0]["Id"] for f in failed}], failed

    sqs = AnsweringSqs(answer)
    failures = Enqueuer(sqs, sleep=lambda _s: None).send("url", _three())
    assert [f.key for f in failures] == ["r0@example.org"]
    assert sqs.calls == [["0", "1", "2"], ["1"]]


def test_the_stand_ins_answers_have_the_shape_of_botocores_model_of_sendmessagebatch():
    import botocore.session

    output = botocore.session.get_session().get_service_model("sqs").operation_model("SendMessageBatch").output_shape
    answer = AnsweringSqs(lambda _c, entries: (entries[:1], [(entries[1], False, "InternalError")]))
    resp = answer.send_message_batch("url", [{"Id": "0", "MessageBody": "a"}, {"Id": "1", "MessageBody": "b"}])
    assert set(resp) <= set(output.members) and set(output.required_members) <= set(resp)
    for name in ("Successful", "Failed"):
        entry_shape = output.members[name].member
        for entry in resp[name]:
            assert set(entry) <= set(entry_shape.members) and set(entry_shape.required_members) <= set(entry)
