"""Peer queries: a workflow confirms what an internal signal claims by asking the sender's own state.

Signals carry no sender and have no validators (anyone who may act on the namespace can send any signal by
hand), so the rollout, its stages and the service lock treat an internal signal as a poke and act only on
what a query of the other workflow answers; queries change nothing and answer only from that workflow's own
code."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel
from temporalio import activity
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.service import RPCError, RPCStatusCode

QUERY_RPC_TIMEOUT = timedelta(seconds=30)  # under the activity's start-to-close (options.CONFIRM); a busy server is slow, not gone


class PeerQuery(BaseModel):
    """Ask workflow `workflow_id` its query `query` (no argument)."""

    workflow_id: str
    query: str


class PeerAnswer(BaseModel):
    """The answer as plain JSON for the caller's own model to validate; `found` is False if there is no such workflow."""

    found: bool
    answer: Any = None
    error: str | None = None  # the query failed (a workflow of another type, or a bug in its handler)


class PeerActivities:
    """Holds the client used to query other workflows."""

    def __init__(self, client: Client) -> None:
        self.client = client

    @activity.defn
    async def query_workflow(self, q: PeerQuery) -> PeerAnswer:
        """Run a query on the latest run of `workflow_id` (a closed one answers from its final state)."""
        try:
            answer = await self.client.get_workflow_handle(q.workflow_id).query(
                q.query, rpc_timeout=QUERY_RPC_TIMEOUT)
        except RPCError as err:
            if err.status == RPCStatusCode.NOT_FOUND:
                return PeerAnswer(found=False)
            raise
        except WorkflowQueryFailedError as err:
            return PeerAnswer(found=True, error=str(err))
        return PeerAnswer(found=True, answer=answer)
