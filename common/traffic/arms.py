"""The share of one stage's traffic each arm of a weighted canary gets (primary, canary, baseline): the model a
canary router reads and writes, and the stage workflow plans and records. Pure data, so workflows import it from
here and never from the adapters that set it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


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
