"""A tenant's SES secret sealed under a key whose alias KMS does not yet honour: a typed error the
invocation raises (Lambda retries it), never a rejection of the tenant's message."""

import boto3
import pytest
from botocore.stub import Stubber

from chalicelib.core.errors import SecretsKeyNotReady
from chalicelib.stores.tenant_secrets import TenantSecrets

ALIAS = "alias/moonsend-dev-tenant-secrets"


def _kms(error_code: str):
    kms = boto3.client("kms", region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="y")
    stub = Stubber(kms)
    # Encrypt's errors as KMS's model lists them (botocore's kms service-2.json: Encrypt's "errors").
    stub.add_client_error("encrypt", service_error_code=error_code, http_status_code=400)
    stub.activate()
    return kms


def test_an_alias_not_yet_honoured_is_a_retryable_typed_error_saying_why():
    secrets = TenantSecrets(lambda: _kms("AccessDeniedException"), ALIAS)
    with pytest.raises(SecretsKeyNotReady, match="up to five minutes"):
        secrets.seal("acme", "s" * 40)


def test_a_throttled_encrypt_is_raised_as_it_is():
    from botocore.exceptions import ClientError

    secrets = TenantSecrets(lambda: _kms("ThrottlingException"), ALIAS)
    with pytest.raises(ClientError) as raised:
        secrets.seal("acme", "s" * 40)
    assert not isinstance(raised.value, SecretsKeyNotReady)
