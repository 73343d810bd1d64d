"""The operator's objects, built from the operator's process (after infra.operator_env.client_env): the
actions every operator command and the page take, and the page itself."""

from __future__ import annotations

from typing import Any

import boto3

from chalicelib.core.config import Settings
from chalicelib.stores.operator_log import OperatorLog
from infra.ops.actions import OperatorActions
from infra.replay import ReplayReport, replay_failed


def operator_identity() -> str:
    """The ARN of the credentials this process acts with: who the operator log says acted."""
    return str(boto3.client("sts").get_caller_identity()["Arn"])


def operator_actions(container: Any, settings: Settings, via: str) -> OperatorActions:
    r = settings.resources

    def replay(function: str | None) -> ReplayReport:
        sqs = boto3.client("sqs")
        url = sqs.get_queue_url(QueueName=r.failed_invocations_queue.name)["QueueUrl"]
        return replay_failed(sqs, boto3.client("lambda"), url, only=function)

    log = OperatorLog(r.operator_log_table.name, settings.region)
    return OperatorActions(container, log, operator_identity(), via, replay)


def ops_app(container: Any, settings: Settings, port: int) -> Any:
    from infra.ops.app import OpsApp
    from infra.ops.overview import Reader

    reader = Reader(settings, container, boto3.client("sqs"), boto3.client("cloudwatch"), boto3.client("sesv2"))
    actions = operator_actions(container, settings, "page")
    return OpsApp(reader.read, actions, stage=settings.resources.stage, who=actions.who, port=port)
