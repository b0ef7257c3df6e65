"""What a canary traffic router implements: the exact share of a stage's traffic each arm gets.

A weighted canary gives the canary and its baseline an exact share of one (region, environment)'s traffic
(`common.traffic.arms.ArmWeights`), raised in steps, whatever the replica counts (an HPA on the primary does
not move it). A router reads the
current weights and writes new ones guarded by what the caller last read — compare-and-set, as the Route 53
evacuation guards each step — so a worker killed mid-step leaves weights the next worker reads and finishes
from, never a weight written twice or over someone else's change.

Routers: `gateway-api` (an HTTPRoute's backendRefs weights, Kubernetes CustomObjectsApi), `alb` (an
Application Load Balancer listener rule's weighted target groups, boto3), and the simulated fleet's.
"""

from __future__ import annotations

from typing import ClassVar, Literal, Protocol, runtime_checkable

from activities.adapters.base import AdapterError
from common.failures import AdapterErrorKind
from common.traffic.arms import ArmWeights
from common.types import StageRef

RouterKind = Literal["gateway-api", "alb", "simulated"]


class RouterConflict(AdapterError):
    """The weights were not what the caller last read: someone (or an earlier attempt) changed them. Not retried
    blindly: the caller reads again and decides (finish the step it planned, or stop)."""

    kind: ClassVar[AdapterErrorKind] = "TrafficError"


@runtime_checkable
class TrafficRouter(Protocol):
    """Reads and sets one stage's arm weights. Idempotent: setting the weights already in place is a no-op that
    returns them; `expect` guards the write (None: write whatever is there, used only to withdraw)."""

    kind: RouterKind

    async def weights(self, stage: StageRef) -> ArmWeights:
        """The weights in force now (an arm the route does not name has 0)."""
        ...

    async def set_weights(self, stage: StageRef, want: ArmWeights, *, expect: ArmWeights | None) -> ArmWeights:
        """Write `want` if the weights in force are `expect` (or already `want`); raise RouterConflict otherwise.
        Returns the weights in force after the call."""
        ...
