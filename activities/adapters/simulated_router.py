"""The simulated fleet's canary router: arm weights kept in the fleet's state, honoured by its metric samples.

A weighted arm's sample count follows its share (FleetScenario.full_sample_share), so a 5% step yields fewer
samples and the judge extends rather than deciding on nothing. Every write is compare-and-set in one fleet
transaction and logged as a call and an effect (`SimulatedFleet.effects`, field `weights`), so tests can check
that no weight the plan did not contain was ever written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from activities.adapters.routers.base import RouterConflict, RouterKind
from common.traffic.arms import ArmWeights
from common.types import StageRef

if TYPE_CHECKING:
    from activities.adapters.simulated import SimulatedFleet


def _arms(w: dict[str, int] | None) -> ArmWeights:
    return ArmWeights(primary=100) if w is None else ArmWeights(**w)


class SimulatedCanaryRouter:
    """The `simulated` router of `canary.traffic`: one weight set per stage in the fleet's SQLite state."""

    kind: RouterKind = "simulated"

    def __init__(self, fleet: SimulatedFleet) -> None:
        self.fleet = fleet

    async def weights(self, stage: StageRef) -> ArmWeights:
        return _arms(await self.fleet.arm_weights(stage))

    async def set_weights(self, stage: StageRef, want: ArmWeights, *, expect: ArmWeights | None) -> ArmWeights:
        conflict: list[ArmWeights] = []

        def change(current: dict[str, int] | None) -> dict[str, int] | None:
            now = _arms(current)
            if now == want or expect is None or now == expect:
                return want.model_dump()
            conflict.append(now)
            return current

        after = await self.fleet.arm_weights(stage, change, version=f"{want.canary}/{want.baseline}/{want.primary}")
        if conflict:
            raise RouterConflict(f"{stage.key}: the weights are {conflict[0].line()}, not {expect.line() if expect else '?'} "
                                 f"as last read; not changed to {want.line()}", retryable=False)
        return _arms(after)
