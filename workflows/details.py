"""Markdown for the Temporal UI's Current Details: pure functions of a rollout's or a stage's state."""

from __future__ import annotations

import json

from common.types import TERMINAL
from workflows.models import RolloutState

WHO = "<your name>"


def how_to_act(state: RolloutState, *, paused: bool, waiting_window: set[str]) -> list[tuple[str, dict[str, object]]]:
    """The updates a release manager can send now, each with an example JSON payload."""
    if state.status in TERMINAL:
        return []
    out: list[tuple[str, dict[str, object]]] = []
    if state.pending_approvals:
        gate = state.pending_approvals[0]
        target: dict[str, object] = {"wave": int(gate.removeprefix("wave-"))} if gate.startswith("wave-") else {"stage": gate}
        out.append(("approve", {**target, "approver": WHO, "comment": "looks good"}))
        out.append(("reject", {**target, "approver": WHO, "reason": "why"}))
    if waiting_window:
        out.append(("override_window", {"stage": sorted(waiting_window)[0], "by": WHO, "reason": "why"}))
    out.append(("resume", {"by": WHO}) if paused else ("pause", {"by": WHO, "reason": "why"}))
    out.append(("abort", {"by": WHO, "reason": "why"}))
    return out


def rollout_details(state: RolloutState, *, waves: int, paused: bool, waiting_window: set[str]) -> str:
    """State, stage, what the rollout waits for, how to act, and the canary reports."""
    s = state
    paras = [f"## {s.service} `{s.version}` — **{s.status.replace('_', ' ')}**"]
    if s.current_wave and s.status not in TERMINAL:
        paras.append(f"Wave {s.current_wave}/{waves}; current stage: {s.current_stage or '-'}")
    if s.reason:
        paras.append(f"Reason: {s.reason}")
    if s.waiting_for:
        paras.append(f"Waiting for: {s.waiting_for}")
    examples = how_to_act(state, paused=paused, waiting_window=waiting_window)
    if examples:
        paras.append("How to act (More actions → Send an Update, or the `bifrost` CLI):\n\n"
                     + "\n".join(f"- `{name}`: `{json.dumps(example)}`" for name, example in examples))
    reports = [f"- {st.key}: {st.verdict} ({st.score:g}) `{st.report_path}`"
               for st in s.stages if st.report_path and st.score is not None]
    if reports:
        paras.append("Canary reports:\n\n" + "\n".join(reports))
    return "\n\n".join(paras)


def stage_details(key: str, status: str, service: str, before: str | None, version: str, detail: str,
                  report_path: str | None) -> str:
    """A stage's own page: where it is, which versions, and its canary report."""
    lines = [f"**Stage {key}** — {status}", f"{service} `{before}` → `{version}`"]
    if detail:
        lines.append(detail)
    if report_path:
        lines.append(f"Canary report: `{report_path}`")
    return "\n\n".join(lines)
