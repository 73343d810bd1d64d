"""SQS in memory, as the drainer, the enqueuer and the parking see it."""

from __future__ import annotations


class FakeSqs:
    """One queue: `waiting` messages to receive; what was deleted, re-hidden, sent back or sent in batches.

    `fail_ids`: SendMessageBatch entry ids SQS refuses (the caller's fault), as for an oversized body."""

    def __init__(self, bodies=(), receives=1, sent_ms=None, fail_ids=()):
        self.waiting = [
            {
                "MessageId": str(i),
                "ReceiptHandle": f"rh{i}",
                "Body": b,
                "Attributes": {"ApproximateReceiveCount": str(receives)}
                | ({"SentTimestamp": str(sent_ms)} if sent_ms else {}),
            }
            for i, b in enumerate(bodies)
        ]
        self.deleted, self.visibility, self.requeued = [], [], []
        self.batches, self.batched = [], []
        self.fail_ids = set(fail_ids)

    def get_queue_url(self, QueueName):
        return {"QueueUrl": f"https://sqs/{QueueName}"}

    def get_queue_attributes(self, QueueUrl, AttributeNames):
        return {"Attributes": {"ApproximateNumberOfMessages": str(len(self.waiting))}}

    def receive_message(self, QueueUrl, MaxNumberOfMessages, **_kw):
        out, self.waiting = self.waiting[:MaxNumberOfMessages], self.waiting[MaxNumberOfMessages:]
        return {"Messages": out} if out else {}

    def delete_message_batch(self, QueueUrl, Entries):
        self.deleted += [e["ReceiptHandle"] for e in Entries]
        return {"Successful": [{"Id": e["Id"]} for e in Entries], "Failed": []}

    def change_message_visibility(self, QueueUrl, ReceiptHandle, VisibilityTimeout):
        self.visibility.append((ReceiptHandle, VisibilityTimeout))

    def send_message(self, QueueUrl, MessageBody, DelaySeconds, MessageAttributes=None):
        self.requeued.append((MessageBody, DelaySeconds, MessageAttributes))

    def send_message_batch(self, QueueUrl, Entries):
        self.batches.append((QueueUrl, Entries))
        self.batched += [e["MessageBody"] for e in Entries if e["Id"] not in self.fail_ids]
        ok = [{"Id": e["Id"]} for e in Entries if e["Id"] not in self.fail_ids]
        bad = [
            {"Id": e["Id"], "Code": "InvalidMessageContents", "Message": "no", "SenderFault": True}
            for e in Entries
            if e["Id"] in self.fail_ids
        ]
        return {"Successful": ok, "Failed": bad}

    def delete_message(self, QueueUrl, ReceiptHandle):
        self.deleted.append(ReceiptHandle)
