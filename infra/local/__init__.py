"""The local stack: moto's server on loopback, and two kinds of module beside it.

Each module's docstring opens with its kind. "Emulator:" does what AWS does and moto does not (alarms,
SNS to Lambda, the Lambda runtime, streams, schedules, SES, AWS's limits, IAM, the state kept across a
restart). "Accelerator:" makes moto fast enough for the pipeline's rates, with AWS's answers unchanged
(fast_sqs, fast_dynamodb, direct_calls, keepalive, the gateway's short paths). docs/local-stack.md lists
both.
"""
