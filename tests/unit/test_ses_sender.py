"""SesSender: the configuration set in a tenant's own account, created once, and sends without it if refused."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from botocore.exceptions import ClientError

from chalicelib.core.contract import Sender
from chalicelib.send.ses_sender import SesSender


class FakeSesV2:
    def __init__(self, refuse=None):
        self.created, self.sent = [], []
        self.refuse = refuse
        self.lock = threading.Lock()

    def create_configuration_set(self, ConfigurationSetName):
        if self.refuse:
            raise ClientError({"Error": {"Code": self.refuse, "Message": "no"}}, "CreateConfigurationSet")
        with self.lock:
            if ConfigurationSetName in self.created:
                raise ClientError({"Error": {"Code": "AlreadyExistsException"}}, "CreateConfigurationSet")
            self.created.append(ConfigurationSetName)

    def create_configuration_set_event_destination(self, **kw):
        with self.lock:
            self.created.append(("destination", kw["EventDestination"]["SnsDestination"]["TopicArn"]))

    def send_email(self, **params):
        with self.lock:
            self.sent.append(params.get("ConfigurationSetName"))
        return {"MessageId": f"m{len(self.sent)}"}


def _sender(client):
    return SesSender(
        "us-east-1",
        "moonsend-test-events",
        "arn:aws:sns:us-east-1:123456789012:moonsend-test-SesEvents",
        clients=lambda _sender, _platform: client,
    )


TENANT = Sender("news@acme.io", "Acme", "eu-west-1", "AKIAACME", "secret", 10.0)


def test_a_tenant_account_gets_the_configuration_set_once_however_many_sends_start_together():
    client = FakeSesV2()
    ses = _sender(client)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda i: ses.send(TENANT, f"r{i}@x.io", b"raw"), range(40)))
    assert client.created == [
        "moonsend-test-events",
        ("destination", "arn:aws:sns:us-east-1:123456789012:moonsend-test-SesEvents"),
    ]
    assert set(client.sent) == {"moonsend-test-events"} and len(client.sent) == 40


def test_a_tenant_whose_keys_may_not_create_it_still_sends_without_it():
    client = FakeSesV2(refuse="AccessDeniedException")
    ses = _sender(client)
    for i in range(3):
        assert ses.send(TENANT, f"r{i}@x.io", b"raw") == f"m{i + 1}"
    assert client.sent == [None, None, None]


def test_the_platform_account_uses_the_provisioned_set_without_creating_it():
    client = FakeSesV2()
    ses = _sender(client)
    ses.send(Sender("news@free.io", "Free", None, None, None, 1.0), "a@x.io", b"raw", platform=True)
    assert client.created == [] and client.sent == ["moonsend-test-events"]


def test_a_lost_answer_is_an_unknown_outcome_but_a_request_that_never_left_is_safe_to_retry():
    """A read timeout or a closed connection may come after SES accepted the email; a refused connection
    cannot. Only the first must keep the recipient's claim (chalicelib.send.drainer)."""
    import pytest
    from botocore.exceptions import ConnectionClosedError, EndpointConnectionError, ReadTimeoutError

    from chalicelib.core.errors import SendOutcomeUnknown, TransientSendError

    class Failing(FakeSesV2):
        def __init__(self, exc):
            super().__init__()
            self.exc = exc

        def send_email(self, **params):
            raise self.exc

    url = "https://email.eu-west-1.amazonaws.com/v2/email/outbound-emails"
    for exc, expected in (
        (ReadTimeoutError(endpoint_url=url), SendOutcomeUnknown),
        (ConnectionClosedError(endpoint_url=url), SendOutcomeUnknown),
        (EndpointConnectionError(endpoint_url=url), TransientSendError),
    ):
        with pytest.raises(expected):
            _sender(Failing(exc)).send(TENANT, "a@example.org", b"raw")


def _sts_answering(monkeypatch, code, status):
    """account_of against a real botocore STS client whose answer is AWS's documented error shape."""
    import boto3
    from botocore.stub import Stubber

    from chalicelib.core import aws

    sts = boto3.client("sts", region_name="us-east-1", aws_access_key_id="AK", aws_secret_access_key="s")
    stubber = Stubber(sts)
    stubber.add_client_error("get_caller_identity", service_error_code=code, http_status_code=status)
    stubber.activate()
    monkeypatch.setattr(aws, "tenant_client", lambda *_a, **_k: sts)


def test_keys_aws_does_not_accept_refuse_the_message_with_why_and_sts_trouble_is_retried(monkeypatch):
    from chalicelib.core.errors import SenderRefused

    sender = Sender("a@x.io", "A", "us-east-1", "AKIABAD", "bad", 5.0)
    _sts_answering(monkeypatch, "InvalidClientTokenId", 403)
    with pytest.raises(SenderRefused, match=r"sender\.apiKey: AWS does not accept these keys \(InvalidClientTokenId\)"):
        SesSender("us-east-1", None, None).account_of(sender)
    _sts_answering(monkeypatch, "Throttling", 400)
    with pytest.raises(ClientError):  # not the keys' fault: the event is retried, nothing is refused
        SesSender("us-east-1", None, None).account_of(sender)
