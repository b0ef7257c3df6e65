"""A weighted canary's steps: the exact share of a stage's traffic the canary (and its baseline) get, step by step.

`canary.traffic` in a request: a router that sets the shares, the canary's percent at each step, and whether the
baseline gets the same share (compare like with like) or none. Pure: the request, the plan, the stage workflow
and the CLI read the same arithmetic.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

RouterName = Literal["gateway-api", "alb", "simulated"]
MAX_CANARY_STEPS = 10  # each step is at least one analysis window; ten windows are already a long canary


class StepWeights(BaseModel):
    """One step's percent of the stage's traffic per arm (they sum to 100)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    primary: int = Field(ge=0, le=100)
    canary: int = Field(ge=0, le=100)
    baseline: int = Field(ge=0, le=100)

    def line(self) -> str:
        return f"canary {self.canary}% · baseline {self.baseline}% · primary {self.primary}%"


class CanaryTraffic(BaseModel):
    """`canary.traffic`: which router gives the canary an exact share, and the shares, step by step."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    router: RouterName = Field(description="gateway-api (an HTTPRoute's weights), alb (weighted target groups), "
                                           "or simulated (the simulated fleet)")
    steps: list[int] = Field(min_length=1, max_length=MAX_CANARY_STEPS,
                             description="the canary's percent of the stage's traffic at each step, strictly increasing")
    baseline_share: Literal["same"] = Field(
        default="same", description="same: the baseline gets the canary's share at each step (the judge compares the "
                                    "canary with it, so it needs as many samples)")

    @field_validator("steps")
    @classmethod
    def _increasing(cls, v: list[int]) -> list[int]:
        for i, pct in enumerate(v):
            if not 0 < pct <= 100:
                raise ValueError(f"steps[{i}] = {pct}: each step is a percent of the stage's traffic above 0 and at most 100")
        for i in range(1, len(v)):
            if v[i] <= v[i - 1]:
                raise ValueError(f"steps must be strictly increasing (steps[{i}] = {v[i]} after {v[i - 1]})")
        return v

    @model_validator(mode="after")
    def _fits(self) -> CanaryTraffic:
        if self.baseline_share == "same":  # the only choice today; kept as a field so others can be added
            over = [p for p in self.steps if 2 * p > 100]
            if over:
                raise ValueError(f"steps: with baseline_share: same the baseline gets the canary's share too, so a step "
                                 f"of {over[0]}% sends {2 * over[0]}% of the traffic to canary and baseline; keep every "
                                 "step at most 50, or set baseline_share: none")
        return self

    def weights(self, step: int) -> StepWeights:
        """The weights of step `step` (0-based)."""
        canary = self.steps[step]
        baseline = canary if self.baseline_share == "same" else 0
        return StepWeights(primary=100 - canary - baseline, canary=canary, baseline=baseline)

    def planned(self) -> list[StepWeights]:
        return [self.weights(i) for i in range(len(self.steps))]

    def line(self) -> str:
        """How the plan shows the steps: "5% → 25% → 50% (gateway-api, baseline same)"."""
        return f"{' → '.join(f'{p}%' for p in self.steps)} ({self.router}, baseline {self.baseline_share})"
