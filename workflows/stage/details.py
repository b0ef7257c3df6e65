"""A stage's state as Markdown: its own page (Current Details), and the cells the rollout's stage table shows.

Pure functions of a `StageState`. The rollout's dashboard (workflows/rollout/details.py) imports the cells from
here, so a stage reads the same on its own page and in its rollout's table.
"""

from __future__ import annotations

import json

from common.text import code_span, ratio, web_url
from common.text import markdown as md
from workflows.controls.details import WHO, link, when
from workflows.stage.models import StageState


def verdict_cell(st: StageState) -> str:
    if st.verdict is None:
        return "–"
    score = f" {st.score:g}" if st.score is not None else ""
    return link(f"{st.verdict}{score}", web_url(st.report_url))


def soak_cell(st: StageState) -> str:
    if not st.soak_max_looks:
        return "–"
    ends = f", ends {when(st.soak_ends_at)}" if st.soak_ends_at and st.status == "soaking" else ""
    return f"look {ratio(st.soak_looks, st.soak_max_looks)}{ends}"


def steps_cell(st: StageState) -> str:
    """A weighted canary's step and weights (canary.traffic), and when it was withdrawn to 0."""
    if not st.canary_steps:
        return "–"
    withdrawn = f"; withdrawn to weight 0 at {when(st.withdrawn_at)}" if st.withdrawn_at else ""
    return f"step {ratio(st.canary_step, st.canary_steps)} — {md(st.canary_weights or 'not set yet')}{withdrawn}"


def versions_cell(st: StageState) -> str:
    before, now = st.version_before or "?", st.version_now or "?"
    return f"`{before}`" if before == now else f"`{before}` → `{now}`"


def status_cell(st: StageState) -> str:
    status = st.status.replace("_", " ")
    if st.status == "succeeded" and st.awaiting_verdict:
        status += " (may roll back)"
    return status


def stage_details(st: StageState, *, service: str, version: str, detail: str = "") -> str:
    """A stage's own page: where it is, which versions, its verdict and report, what it waits for."""
    lines = [f"## Stage {st.key} — **{st.status.replace('_', ' ').upper()}**",
             f"{service}: `{st.version_before or '?'}` → `{version}`; now on `{st.version_now or st.version_before or '?'}`"]
    if st.reason:
        lines.append(f"**Reason:** {md(st.reason)}")
    if detail:
        lines.append(md(detail))
    if st.verdict is not None:
        report = f" — {link('canary report', st.report_url)}" if st.report_url else ""
        lines.append(f"**Verdict:** {st.verdict} (score {st.score:g}){report}" if st.score is not None
                     else f"**Verdict:** {st.verdict}{report}")
    if st.extended:  # the judge's own words: metric names (a restricted alphabet) and numbers
        lines.append(f"**Canary analysis:** look {st.analysis_looks} — {md(st.extended)}")
    if st.canary_steps:
        lines.append(f"**Canary traffic:** {steps_cell(st)}")
    if st.soak_max_looks:
        lines.append(f"**Soak:** {soak_cell(st)}")
    if st.awaiting_verdict:
        lines.append("**Waiting for:** the rollout's verdict — it keeps this version when every stage succeeds, "
                     "and rolls this stage back if a later stage fails (by the rollout's rollback scope)")
    lines.append(retry_not_reset(st.key))
    return "\n\n".join(lines)


def retry_not_reset(key: str) -> str:
    """What a stage's page says about the UI's Reset button: not here; how to try the stage again instead."""
    payload = json.dumps({"stage": key, "action": "retry", "by": WHO, "reason": "why"})
    return ("**Do not Reset this stage's workflow** (a stage reset alone is not supported). To try it again: while the "
            f"rollout holds it on failure, send the rollout (its parent) the update `resolve_hold` {code_span(payload)} "
            f"(or {code_span(f'bifrost retry ROLLOUT_ID --stage {key}')}); once the rollout has ended, submit it again: "
            "the new run resumes from this stage.")
