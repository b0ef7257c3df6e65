"""How much work one worker process takes at once; plain data, so the CLI can show the defaults without the SDK."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerLimits:
    """How much one worker process takes from the task queue at once (see deploy/README.md, "Scaling out").

    One Python process runs workflow code and async activities on one core. A task it holds but cannot
    run yet only waits in its memory, where no other worker can take it, and a workflow task held past
    10 s times out. So each process takes a bounded amount and leaves the rest on the task queue for the
    other processes and pods: more load is met with more workers on the queue, not with bigger limits.
    """

    workflow_tasks: int = 20
    activities: int = 20
    local_activities: int = 20
    cached_workflows: int = 1000

    def __post_init__(self) -> None:
        # the SDK needs two workflow-task slots with a sticky cache: one for the sticky queue, one for the normal one
        for name, least in (("workflow_tasks", 2), ("activities", 1), ("local_activities", 1), ("cached_workflows", 1)):
            if getattr(self, name) < least:
                raise ValueError(f"WorkerLimits.{name} must be at least {least}, got {getattr(self, name)}")
