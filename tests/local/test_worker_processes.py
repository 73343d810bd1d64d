"""Worker processes (infra.local.workers): each function in processes of its own, as Lambda's containers.

The runtime's own tests run handlers from tests/local/worker_probe.py in real worker processes; the last
ones start a whole stack with `StackConfig(worker_processes=True)`."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.local.identity import RoleCredentials
from infra.local.lambda_runtime import FunctionCrashed, FunctionError, FunctionRunner, LocalFunction

REGION, ACCOUNT = "us-east-1", "123456789012"


def _fn(handler: str, **kw: Any) -> LocalFunction:
    def not_here(_event: dict[str, Any], _context: Any) -> None:
        raise AssertionError("ran in the test's process, not in a worker")

    return LocalFunction(
        handler, f"moonsend-test-{handler}", not_here, worker=f"tests.local.worker_probe:{handler}", **kw
    )


@pytest.fixture
def runner() -> Iterator[FunctionRunner]:
    r = FunctionRunner({}, REGION, ACCOUNT, retry_delay_s=0.01)
    r.use_workers(per_function=4)
    yield r
    r.shutdown()


def test_a_worker_has_only_its_functions_environment_and_its_roles_credentials(runner: FunctionRunner) -> None:
    role = RoleCredentials("moonsend-test-describe", "arn:aws:iam::1:role/r", "ASIAROLE", "role-secret", "role-token")
    env = {"PATH": os.environ["PATH"], "PROBE_ONLY_MINE": "yes", "AWS_ACCESS_KEY_ID": "not-the-role's"}
    fn = _fn("describe", role=role, environment=env, timeout_s=30)
    seen = runner.invoke(fn, {})
    assert seen["pid"] != os.getpid()
    assert seen["env"]["PROBE_ONLY_MINE"] == "yes" and seen["in_thread"] == "yes"
    assert not {k for k in seen["env"] if k.startswith("MOONSEND_")} - {"MOONSEND_LOG_LEVEL"}
    assert (seen["access_key"], seen["token"]) == ("ASIAROLE", "role-token")
    assert 25_000 < seen["remaining_ms"] <= 30_000
    assert seen["function_name"] == "moonsend-test-describe"


def test_a_warm_worker_is_reused_and_concurrent_invocations_get_one_each(runner: FunctionRunner) -> None:
    fn = _fn("describe")
    first = runner.invoke(fn, {})["pid"]
    assert runner.invoke(fn, {})["pid"] == first
    pids: list[int] = []
    threads = [threading.Thread(target=lambda: pids.append(runner.invoke(fn, {"sleep_s": 1})["pid"])) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(pids)) == 3 and first in pids
    assert runner.workers is not None and runner.workers.started == 3 and runner.workers.cpu_s() > 0


def test_a_handlers_exception_comes_back_with_its_type_and_an_async_event_goes_to_on_failure() -> None:
    records: list[dict[str, Any]] = []
    runner = FunctionRunner({}, REGION, ACCOUNT, retry_delay_s=0.01, on_failure=lambda _fn, r: records.append(r))
    runner.use_workers(per_function=2)
    try:
        fn = _fn("fail", on_failure="arn:aws:sqs:us-east-1:123456789012:failed")
        with pytest.raises(FunctionError) as raised:
            runner.invoke(fn, {"n": 1})
        assert raised.value.error_type == "ValueError" and str(raised.value) == "no good: 1"
        done: list[bool] = []
        runner.invoke_async(fn, {"n": 2}, on_done=done.append)
        assert runner.wait_idle(20)
        assert done == [False] and runner.stats.errors == 4
        assert records[0]["responsePayload"] == {"errorMessage": "no good: 2", "errorType": "ValueError"}
        assert records[0]["requestContext"]["approximateInvokeCount"] == 3
    finally:
        runner.shutdown()


def test_a_worker_that_dies_mid_invocation_is_a_crash_and_the_next_gets_a_new_one(runner: FunctionRunner) -> None:
    fn = _fn("exit_now")
    with pytest.raises(FunctionCrashed, match="exited"):
        runner.invoke(fn, {})
    with pytest.raises(FunctionCrashed):
        runner.invoke(fn, {})
    assert runner.workers is not None and runner.workers.started == 2 and runner.workers.processes() == 0


def test_stopping_to_save_tells_a_running_invocation_its_time_is_up(runner: FunctionRunner) -> None:
    fn = _fn("wait_for_hurry", timeout_s=60)
    waited: list[int] = []
    t = threading.Thread(target=lambda: waited.append(runner.invoke(fn, {})))
    t.start()
    time.sleep(1.5)  # the worker started and is waiting
    assert runner.stop_for_save(20)
    t.join()
    assert 1000 < waited[0] < 15_000


class _Kill:
    """A fault injector's side of a worker's invocation (infra.local.faults.Faults): kill before ListQueues."""

    def __init__(self) -> None:
        self.reports: list[tuple[dict[str, int], bool]] = []

    def worker_spec(self, fn: LocalFunction) -> dict[str, Any]:
        return {
            "seed": 1,
            "kills": [["ListQueues", "before", 1.0, "killed before", "killed before ListQueues"]],
            "deadline_in_s": None,
            "active_for_s": 60,
        }

    def worker_report(self, fn: LocalFunction, injected: dict[str, int], crashed: bool) -> None:
        self.reports.append((injected, crashed))


def test_an_injected_kill_ends_the_workers_process(runner: FunctionRunner) -> None:
    fn = _fn("call_sqs")
    runner.worker_faults = kill = _Kill()
    with pytest.raises(FunctionCrashed, match="killed before ListQueues"):
        runner.invoke(fn, {})
    assert kill.reports == [({"killed before": 1}, True)]
    assert runner.workers is not None and runner.workers.processes() == 0


# --- a whole stack ---------------------------------------------------------------------------------------
# In a process of its own: moto's backends are this process's, and the session's stack may hold them.

_WHOLE_STACK = """
import json, os, sys, tempfile, urllib.error, urllib.request
from pathlib import Path
import botocore.credentials
real_resolver, real_environ = botocore.credentials.create_credential_resolver, os.environ
from infra.local.stack import LocalStack, StackConfig
from infra.producer import CampaignSpec, messages, publish
with tempfile.TemporaryDirectory() as tmp:
    cfg = StackConfig(port=0, api_port=0, outbox=Path(tmp), ses_latency_ms=5.0, worker_processes=True)
    with LocalStack(cfg) as st:
        sender = st.paid_sender("w1", rate=50, ses_max_rate=100)
        topic = st.topic_arns[st.settings.resources.precompile_topic.name]
        spec = CampaignSpec("w1", sender, "Hi {{ name }}", "<p>Hello {{ name }}</p>", "c1")
        people = [{"email": f"r{i}@w1.example", "metadata": {"name": "A"}} for i in range(5)]
        publish(st.client("sns"), topic, messages(spec, people))
        drained = st.wait_until_drained(timeout=120)
        try:
            urllib.request.urlopen(f"{st.api_url}/campaigns/x/report")
            api = 200
        except urllib.error.HTTPError as exc:
            api = exc.code
        print(json.dumps({
            "drained": drained,
            "sent": sum(1 for _ in Path(tmp).rglob("*.eml")),
            "workers": st.runner.workers.started,
            "api_pid": st.api_worker.process.pid,
            "api": api,
            "patched": botocore.credentials.create_credential_resolver is not real_resolver
            or os.environ is not real_environ,
            "denied": sorted(set(st.access.denied)),
        }))
"""


def test_a_whole_stack_runs_its_functions_and_its_api_in_worker_processes() -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "MOONSEND_LOG_LEVEL": "WARNING"}
    done = subprocess.run([sys.executable, "-c", _WHOLE_STACK], cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["drained"] and seen["sent"] == 5
    assert seen["workers"] >= 2  # precompile_email's and send_emails' at least
    assert seen["api"] in (401, 403)  # no key: refused by the app, in the API's own process
    assert not seen["patched"] and seen["denied"] == []
