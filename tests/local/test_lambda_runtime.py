"""The local runtime runs the app's handlers as Lambda would."""

import json
import time

from infra.local.lambda_runtime import FunctionRunner, LambdaContext, LocalFunction


def test_context_counts_down_from_the_configured_timeout():
    ctx = LambdaContext("moonsend-local-send_emails", 2.0, 512, "us-east-1", "123456789012")
    first = ctx.get_remaining_time_in_millis()
    assert 0 < first <= 2000
    time.sleep(0.2)
    assert ctx.get_remaining_time_in_millis() <= first - 150
    assert ctx.invoked_function_arn.endswith(":function:moonsend-local-send_emails")


def test_async_invocation_is_retried_twice_then_recorded_as_failed():
    calls = []

    def handler(event, context):
        calls.append(event)
        raise RuntimeError("boom")

    fn = LocalFunction("h", "moonsend-local-h", handler, timeout_s=5)
    runner = FunctionRunner({fn.function_name: fn}, "us-east-1", "123456789012", retry_delay_s=0.01)
    done = []
    runner.invoke_async(fn, {"n": 1}, on_done=done.append)
    assert runner.wait_idle(5)
    assert len(calls) == 3 and done == [False]
    assert runner.stats.failed_events[0].event == {"n": 1}
    runner.shutdown()


def test_app_functions_are_loaded_with_their_stage_settings(stack):
    fns = {f.handler_name: f for f in stack.runner.functions.values()}
    assert set(fns) >= {"precompile_email", "send_emails"}
    assert fns["send_emails"].function_name == "moonsend-local-send_emails"
    assert fns["send_emails"].timeout_s == 60


def test_lambda_invoke_event_runs_the_handler_asynchronously(stack):
    lam = stack.client("lambda")
    before = stack.runner.stats.started
    payload = {
        "Records": [
            {
                "EventSource": "aws:sns",
                "Sns": {
                    "Message": json.dumps({"NewStateValue": "OK"}),
                    "Subject": None,
                    "MessageAttributes": {},
                },
            }
        ]
    }
    resp = lam.invoke(
        FunctionName="moonsend-local-send_emails",
        InvocationType="Event",
        Payload=json.dumps(payload).encode(),
    )
    assert resp["StatusCode"] == 202
    deadline = time.monotonic() + 5
    while stack.runner.stats.started == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stack.runner.stats.started > before


def test_lambda_invoke_request_response_returns_the_result(stack):
    payload = {
        "Records": [
            {
                "EventSource": "aws:sns",
                "Sns": {"Message": "not json", "Subject": None, "MessageAttributes": {}},
            }
        ]
    }
    resp = stack.client("lambda").invoke(
        FunctionName="moonsend-local-send_emails", Payload=json.dumps(payload).encode()
    )
    assert resp["StatusCode"] == 200 and "FunctionError" not in resp
    assert json.loads(resp["Payload"].read()) is None
