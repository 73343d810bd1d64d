"""Producers in other AWS accounts publish to PrecompileEmail: the stage names them, the template grants them
the topic and its key (AWS's managed key alias/aws/sns cannot be granted to another account)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from infra import cfn

PRODUCER = "444455556666"


def _config(tmp_path, accounts):
    config = json.loads(cfn.CHALICE_CONFIG.read_text())
    config["stages"]["dev"]["producer_accounts"] = accounts
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def test_a_stage_without_producer_accounts_keeps_the_managed_key_and_no_topic_policy(tmp_path, monkeypatch):
    monkeypatch.setattr(cfn, "CHALICE_CONFIG", _config(tmp_path, []))
    res = cfn.merge_template("dev")["Resources"]
    assert res["PrecompileEmailTopic"]["Properties"]["KmsMasterKeyId"] == "alias/aws/sns"
    assert "PrecompileEmailTopicPolicy" not in res


def test_named_producer_accounts_may_publish_and_use_the_topics_key_through_sns_only(tmp_path, monkeypatch):
    monkeypatch.setattr(cfn, "CHALICE_CONFIG", _config(tmp_path, [PRODUCER]))
    res = cfn.merge_template("dev")["Resources"]
    assert res["PrecompileEmailTopic"]["Properties"]["KmsMasterKeyId"] == {"Ref": cfn.TOPICS_KEY}
    (publish,) = res["PrecompileEmailTopicPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert publish["Action"] == "sns:Publish" and publish["Resource"] == {"Ref": "PrecompileEmailTopic"}
    assert publish["Principal"] == {"AWS": [{"Fn::Sub": f"arn:${{AWS::Partition}}:iam::{PRODUCER}:root"}]}
    key = res[cfn.TOPICS_KEY]["Properties"]["KeyPolicy"]["Statement"]
    (use,) = [st for st in key if st["Sid"] == "PrecompileEmailPublishersThroughSns"]
    assert set(use["Action"]) == {"kms:GenerateDataKey*", "kms:Decrypt"}  # what SNS needs of a publisher
    cond = use["Condition"]["StringEquals"]
    assert cond["kms:CallerAccount"] == [{"Ref": "AWS::AccountId"}, PRODUCER]  # its own producers too
    assert cond["kms:ViaService"] == {"Fn::Sub": "sns.${AWS::Region}.amazonaws.com"}
    # cfn-lint (AWS's own checker) passes the topics, their key and policies as a template of their own.
    template = tmp_path / "topics.json"
    sns = ("AWS::SNS::Topic", "AWS::SNS::TopicPolicy")
    topics = {name: r for name, r in res.items() if r.get("Type") in sns or name == cfn.TOPICS_KEY}
    assert topics[cfn.TOPICS_KEY]["Type"] == "AWS::KMS::Key"
    assert {"PrecompileEmailTopic", "SendEmailsTopic", "SesEventsTopic"} <= topics.keys()
    template.write_text(json.dumps({"AWSTemplateFormatVersion": "2010-09-09", "Resources": topics}))
    lint = subprocess.run(
        [str(Path(sys.executable).with_name("cfn-lint")), str(template)], capture_output=True, text=True
    )
    assert lint.returncode == 0, lint.stdout


def test_a_producer_account_that_is_no_account_id_is_refused_at_packaging(tmp_path):
    with pytest.raises(ValueError, match="12-digit AWS account ids"):
        cfn.producer_accounts("dev", _config(tmp_path, ["arn:aws:iam::444455556666:root"]))
