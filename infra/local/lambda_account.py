"""Emulator: Lambda's GetAccountSettings, which moto does not answer (its server has no route for it).

`moonsend deploy`'s preflight reads it (infra/preflight.py). The answer has the shape of botocore's model
for the operation (`GET /2016-08-19/account-settings`: AccountLimit, AccountUsage) and the figures of an
account with Lambda's default quotas (AWS Lambda Developer Guide, "Lambda quotas": 1,000 concurrent
executions, 75 GB of code storage, 250 MB unzipped, 50 MB zipped for a direct upload), less what the
account's functions in moto reserve (ReservedConcurrentExecutions), as Lambda subtracts it. A new AWS
account may have a lower limit (10): the local stack is an account that asked for the default.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

from infra.local.cfn_limits import caller_account

PATH = "/2016-08-19/account-settings"
CONCURRENT_EXECUTIONS = 1000
TOTAL_CODE_SIZE = 75 * 1024**3
CODE_SIZE_UNZIPPED = 250 * 1024**2
CODE_SIZE_ZIPPED = 50 * 1024**2


def is_account_settings(method: str, path: str) -> bool:
    return method == "GET" and path.rstrip("/") == PATH


def account_settings(environ: Mapping[str, Any], access_key: str, region: str) -> tuple[int, dict[str, str], bytes]:
    from moto.awslambda.models import lambda_backends

    functions = list(lambda_backends[caller_account(environ, access_key)][region].list_functions())
    reserved = sum(int(f.reserved_concurrency or 0) for f in functions)
    body = {
        "AccountLimit": {
            "TotalCodeSize": TOTAL_CODE_SIZE,
            "CodeSizeUnzipped": CODE_SIZE_UNZIPPED,
            "CodeSizeZipped": CODE_SIZE_ZIPPED,
            "ConcurrentExecutions": CONCURRENT_EXECUTIONS,
            "UnreservedConcurrentExecutions": CONCURRENT_EXECUTIONS - reserved,
        },
        "AccountUsage": {
            "TotalCodeSize": sum(int(f.code_size or 0) for f in functions),
            "FunctionCount": len(functions),
        },
    }
    headers = {"Content-Type": "application/json", "x-amzn-RequestId": str(uuid.uuid4())}
    return 200, headers, json.dumps(body).encode()
