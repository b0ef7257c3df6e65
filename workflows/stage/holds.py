"""Where a stage holds on failure (`on_failure: hold` / `evacuate_and_hold`) and what the rollout's decision does.

A canary that fails its analysis holds, canary and baseline running, until the rollout decides: retry on a fresh
window, promote, or roll back (the rollout's resolve_hold update or the hold's timeout), or stops the stage. With
`evacuate_and_hold` in prod the region's traffic moves away while it holds and returns before the canary goes on.
"""

from __future__ import annotations

from workflows.controls import audit_entry
from workflows.stage.context import Failed, StageContext
from workflows.stage.models import HoldAction
from workflows.stage.orders import Orders
from workflows.stage.traffic import Traffic


async def hold_on_failure(stage: StageContext, orders: Orders, traffic: Traffic, reason: str) -> HoldAction:
    """Hold until the rollout decides (or stops the stage). Rollback raises Failed (the stage rolls back);
    promote and retry are returned."""
    st, key, inp = stage.state, stage.key, stage.inp
    st.holds += 1
    orders.decision = None
    st.reason = reason
    if inp.on_failure == "evacuate_and_hold" and inp.environment == "prod" and traffic.evacuated is None:
        traffic.evacuated = await traffic.evacuate(then="held")
        reason = st.reason
    stage.report("held", f"{reason} — canary and baseline keep running until a release manager retries, "
                         "promotes or rolls back")
    await stage.until(lambda: orders.decision is not None or stage.detail.stop_reason is not None,
                      summary=f"held on failure: {key} waits for retry, promote or rollback")
    if orders.decision is None:
        raise Failed(f"{reason}; held, then stopped: {stage.detail.stop_reason}")
    d = orders.decision
    stage.detail.audit.append(audit_entry(d.by, f"hold-{d.action}", key, d.reason))
    if d.action == "rollback":
        raise Failed(f"{reason}; held, then rolled back by {d.by}: {d.reason}")
    st.reason = (f"promoted from a hold by {d.by}: {d.reason} (it had failed: {reason})" if d.action == "promote"
                 else f"retried by {d.by} after: {reason}")
    if traffic.evacuated is not None:  # the traffic returns (health-checked) before the canary goes on
        evacuated, traffic.evacuated = traffic.evacuated, None
        await traffic.restore(evacuated)
        stage.check_stop()
    return d.action
