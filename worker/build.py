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
from activities.traffic import TrafficActivities
from workflows.evacuation import EvacuationWorkflow
from workflows.lock import ServiceLockWorkflow
from workflows.rollout import RolloutWorkflow
from workflows.stage import StageWorkflow

WORKFLOWS = [RolloutWorkflow, StageWorkflow, ServiceLockWorkflow, EvacuationWorkflow]


def activities_for(
    client: Client, task_queue: str, registry: AdapterRegistry, reports_dir: str | Path,
    lock_holder_check: timedelta | None = None,
) -> list[Callable[..., Any]]:
    """Every activity the workflows call, bound to `registry`."""
    deploy = DeployActivities(registry)
    analysis = AnalysisActivities(registry, reports_dir)
    lock = LockActivities(client, task_queue, lock_holder_check)
    notify = NotifyActivities(registry)
    traffic = TrafficActivities(registry)
    return [
        deploy.current_version, deploy.deploy_canary, deploy.deploy_baseline, deploy.promote, deploy.rollback,
        deploy.cleanup, analysis.analyze_canary, analysis.soak_check, lock.request_service_lock, lock.rollout_is_running, notify.notify,
        traffic.plan_traffic, traffic.set_weights, traffic.scale, traffic.check_health, traffic.read_traffic,
    ]


def build_worker(
    client: Client,
    registry: AdapterRegistry,
    *,
    task_queue: str,
    reports_dir: str | Path = ".bifrost/reports",
    graceful_shutdown: timedelta = timedelta(seconds=30),
    lock_holder_check: timedelta | None = None,
) -> Worker:
    """A worker for `task_queue` running the rollout workflows against `registry`."""
    return Worker(
        client,
        task_queue=task_queue,
        workflows=WORKFLOWS,
        activities=activities_for(client, task_queue, registry, reports_dir, lock_holder_check),
        graceful_shutdown_timeout=graceful_shutdown,
    )
