"""Exit codes you can trust: the real `bifrost` command, many at once, against a dev server with a worker.

Before the CLI left with os._exit, about one process in ten died at interpreter teardown (SIGABRT,
"Fatal Python error: PyGILState_Release") after printing a correct result: the Temporal SDK's Rust
threads outlive the interpreter. Measured with 16 or 30 concurrent `submit --wait`: 8 of 62 processes
died by a signal; none of 48 with os._exit. Run without the fix, this test failed (one SIGABRT in 25).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from tests.workflows.helpers import METRICS, fleet, running_worker

BIFROST = str(Path(sys.executable).parent / "bifrost")
SUBMITS = 16
STATUSES = 8


def _request(tmp: Path, i: int) -> Path:
    data = {
        "service": f"exit-{uuid.uuid4().hex[:8]}-{i}",
        "version": "2.0.0",
        "requested_by": "ci",
        "regions": [{"name": "us-east-1", "traffic_share": 1.0, "environments": ["prod"]}],
        "canary": {"metrics": METRICS, "analysis_minutes": 0, "judge": {"min_samples": 30}},
        "soak": {"test_hours": 0, "prod_hours": 0},
    }
    path = tmp / f"r{i}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


async def _bifrost(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(BIFROST, *args, env=env, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    # generous: 16 interpreters starting at once on 2 shared cores take minutes under load; a hang still ends
    out, err = await asyncio.wait_for(proc.communicate(), timeout=420)
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def _died_by_signal(code: int) -> str | None:
    """asyncio reports a signal as a negative code; a shell would show 128 + N."""
    if code < 0:
        return signal.Signals(-code).name
    if code > 128 and code - 128 in {s.value for s in signal.Signals}:
        return signal.Signals(code - 128).name
    return None


@pytest.mark.timeout(900)
async def test_many_concurrent_cli_runs_all_exit_with_the_right_code(env, task_queue, tmp_path):
    child_env = {**os.environ, "TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
                 "TEMPORAL_NAMESPACE": env.client.namespace, "BIFROST_USER": "ci"}
    files = [_request(tmp_path, i) for i in range(SUBMITS)]
    async def submit_then_status(i: int) -> list[tuple[int, str, str]]:
        """`submit --wait`, then (for some) `status` of the finished rollout, overlapping the other submits."""
        done = [await _bifrost("submit", "--wait", "--task-queue", task_queue, str(files[i]), env=child_env)]
        if i < STATUSES:
            service = yaml.safe_load(files[i].read_text())["service"]
            done.append(await _bifrost("status", f"rollout/{service}/2.0.0", env=child_env))
        return done

    async with running_worker(env.client, fleet(), task_queue, tmp_path):
        unknown_id = asyncio.ensure_future(_bifrost("status", "rollout/none/0.0.0", env=child_env))
        per_submit = await asyncio.gather(*(submit_then_status(i) for i in range(SUBMITS)))
        unknown = await unknown_id
    results = [r[0] for r in per_submit]
    statuses = [r[1] for r in per_submit if len(r) > 1] + [unknown]
    signalled = [(code, _died_by_signal(code), err[-300:]) for code, _, err in [*results, *statuses] if _died_by_signal(code)]
    assert signalled == [], signalled
    for code, out, err in results:
        assert code == 0, (code, out, err)
        assert "succeeded: every stage succeeded" in out
        assert "Fatal Python error" not in err
    for code, out, err in statuses[:-1]:
        assert code == 0 and "succeeded" in out, (code, out, err)
    code, _, err = statuses[-1]
    assert code == 1 and "not found" in err
