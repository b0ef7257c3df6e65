"""What a revert shows of itself: its search attributes and the UI's Current Details, pure functions of its state,
used by the workflow (every publish) and by `bifrost revert` (the attributes it starts the run with)."""

from __future__ import annotations

import json
from typing import Any

from temporalio.common import SearchAttributeUpdate

from common.text import code_span
from common.text import markdown as md
from common.vocabulary import REVERT_TERMINAL
from workflows import search
from workflows.controls.details import AUDIT_LINES, WHO, when
from workflows.evacuation.details import value_text
from workflows.revert.models import RevertRegion, RevertState


def view(st: RevertState) -> tuple[list[SearchAttributeUpdate[Any]], str]:
    """The revert's search attributes and its Current Details."""
    return revert_search(st), revert_details(st)


def revert_search(st: RevertState) -> list[SearchAttributeUpdate[Any]]:
    """Service, version, status, the stages being reverted, the furthest environment among them, who asked."""
    envs = {r.environment for r in st.regions if r.key in st.current}
    return [
        search.SERVICE.value_set(st.service),
        search.VERSION.value_set(st.to_version),
        search.STATUS.value_set(st.status),
        search.STAGE.value_set(", ".join(st.current) or "-"),
        search.ENVIRONMENT.value_set("prod" if "prod" in envs else "test" if envs else "-"),
        search.REQUESTED_BY.value_set(st.requested_by),
    ]


def health_cell(r: RevertRegion) -> str:
    """A region's health look: its state first (healthy, ALARM, no data), then each metric before → after with n."""
    if not r.health:
        return "–"
    word = "**no data**" if r.no_data else "**ALARM**" if r.status == "unhealthy" else "**healthy**" if r.values else ""
    values = "; ".join(value_text(v) for v in r.values)
    return " — ".join(x for x in (word, values or md(r.health)) if x)


def revert_details(st: RevertState) -> str:
    """The UI's Current Details: the release undone, each region (last wave first), what it waits for, the audit."""
    lines = [f"**revert** {md(st.service)} → {code_span(st.to_version)} — **{st.status}**", "",
             f"undoes {code_span(st.release or '?')} ({code_span(st.release_version or '?')}); asked by {md(st.requested_by)}: "
             f"{md(st.request_reason)}" + (" (evacuating production regions)" if st.evacuate else "")]
    if st.status == "reverted" and st.release:
        lines += ["", f"{code_span(st.release)} **is reverted**: its stages run {code_span(st.to_version)} again since "
                      f"{when(st.ended_at)} (this revert's own record; the rollout's page still shows how it ended)"]
    if st.waiting_for:
        lines.append(f"waiting for: {md(st.waiting_for)}")
    if st.reason:
        lines.append(f"reason: {md(st.reason)}")
    if st.regions:
        lines += ["", "| stage | wave | status | before → now | health | traffic |", "|---|---|---|---|---|---|"]
        lines += [f"| {md(r.key)} | {r.wave} | {r.status} | {md(r.version_before or '?')} → {md(r.version_now or '?')} | "
                  f"{health_cell(r)} | {md(r.traffic) or '–'} |" for r in st.regions]
    if st.status not in REVERT_TERMINAL:
        payload = json.dumps({"by": WHO, "reason": "why"})
        lines += ["", f"Act: More actions → Update → `pause` / `resume` / `abort` with {code_span(payload)}"]
    if st.audit:
        lines += ["", "last actions:"]
        lines += [f"- {a.at:%H:%M:%S} {md(a.who)}: {md(a.action)} {md(a.target or '')} {md(a.detail)}".rstrip()
                  for a in st.audit[-AUDIT_LINES:]]
    return "\n".join(lines)
