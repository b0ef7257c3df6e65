"""What a canary traffic router implements: the exact share of a stage's traffic each arm gets.

A weighted canary gives the canary and its baseline an exact share of one (region, environment)'s traffic,
raised in steps, whatever the replica counts (an HPA on the primary does not move it). A router reads the
current weights and writes new ones guarded by what the caller last read — compare-and-set, as the Route 53
evacuation guards each step — so a worker killed mid-step leaves weights the next worker reads and finishes
from, never a weight written twice or over someone else's change.

Routers: `gateway-api` (an HTTPRoute's backendRefs weights, Kubernetes CustomObjectsApi), `alb` (an
Application Load Balancer listener rule's weighted target groups, boto3), and the simulated fleet's.
"""

from __future__ import annotations

from typing import ClassVar, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from activities.adapters.base import AdapterError
from common.failures import AdapterErrorKind
from common.types import StageRef

RouterKind = Literal["gateway-api", "alb", "simulated"]


class ArmWeights(BaseModel):
    """Percent of the stage's traffic per arm; they sum to 100. `canary == baseline == 0` means withdrawn."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    primary: int = Field(ge=0, le=100)
    canary: int = Field(default=0, ge=0, le=100)
    baseline: int = Field(default=0, ge=0, le=100)

    @model_validator(mode="after")
    def _sums_to_100(self) -> ArmWeights:
        total = self.primary + self.canary + self.baseline
        if total != 100:
            raise ValueError(f"weights must sum to 100, not {total} (primary {self.primary}, canary {self.canary}, "
                             f"baseline {self.baseline})")
        return self

    @classmethod
    def step(cls, canary: int, *, baseline_same: bool = True) -> ArmWeights:
        """The weights of one step: `canary`% to the canary, the same to the baseline (or none), the rest primary."""
        baseline = canary if baseline_same else 0
        return cls(primary=100 - canary - baseline, canary=canary, baseline=baseline)

    @property
    def withdrawn(self) -> bool:
        return self.canary == 0 and self.baseline == 0

    def line(self) -> str:
        return f"primary {self.primary}% · canary {self.canary}% · baseline {self.baseline}%"


WITHDRAWN = ArmWeights(primary=100)


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
