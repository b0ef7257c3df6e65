"""Assemble a worker: the workflows, and the activities bound to an adapter registry."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from activities.adapters.registry import AdapterRegistry
from activities.analysis import AnalysisActivities
from activities.deploy import DeployActivities
from activities.lock import LockActivities
from activities.notify import NotifyActivities
from worker.limits import WorkerLimits
from workflows.lock import ServiceLockWorkflow
from workflows.rollout import RolloutWorkflow
from workflows.stage import StageWorkflow

WORKFLOWS = [RolloutWorkflow, StageWorkflow, ServiceLockWorkflow]


def activities_for(
    client: Client, task_queue: str, registry: AdapterRegistry, reports_dir: str | Path,
    lock_holder_check: timedelta | None = None,
) -> list[Callable[..., Any]]:
    """Every activity the workflows call, bound to `registry`."""
    deploy = DeployActivities(registry)
    analysis = AnalysisActivities(registry, reports_dir)
    lock = LockActivities(client, task_queue, lock_holder_check)
    notify = NotifyActivities(registry)
    return [
        deploy.current_version, deploy.deploy_canary, deploy.deploy_baseline, deploy.promote, deploy.rollback,
        deploy.cleanup, analysis.analyze_canary, analysis.soak_check, lock.request_service_lock, lock.rollout_is_running, notify.notify,
    ]


def build_worker(
    client: Client,
    registry: AdapterRegistry,
    *,
    task_queue: str,
    reports_dir: str | Path = ".bifrost/reports",
    graceful_shutdown: timedelta = timedelta(seconds=30),
    lock_holder_check: timedelta | None = None,
    limits: WorkerLimits | None = None,
) -> Worker:
    """A worker for `task_queue` running the rollout workflows against `registry`, taking at most `limits` at once."""
    limits = limits or WorkerLimits()
    return Worker(
        client,
        task_queue=task_queue,
        workflows=WORKFLOWS,
        activities=activities_for(client, task_queue, registry, reports_dir, lock_holder_check),
        graceful_shutdown_timeout=graceful_shutdown,
        max_concurrent_workflow_tasks=limits.workflow_tasks,
        max_concurrent_activities=limits.activities,
        max_concurrent_local_activities=limits.local_activities,
        max_cached_workflows=limits.cached_workflows,
    )
