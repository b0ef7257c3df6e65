"""What a revert undoes: the release (read from the server's records, never from the input), the input checked
against it, its stages laid out last wave first, and the version every chosen region runs before anything changes."""

from __future__ import annotations

import asyncio
import json

from pydantic import ValidationError
from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.deploy import DeployActivities
    from activities.errors import error_text
    from activities.models import StageOnly
    from activities.releases import ReleaseActivities, ReleaseFound, ReleaseQuery
    from common.types import EnvKind
    from workflows import options
    from workflows.controls import Controls, Stopped
    from workflows.plan import PlanError, build_plan
    from workflows.request import RolloutRequest
    from workflows.revert.models import RevertInput, RevertRegion, RevertState, RevertStop
    from workflows.rollout.models import RolloutState


class NotRevertible(Exception):
    """The input does not fit the release (or there is none): refused before anything is deployed."""


async def find_release(inp: RevertInput, controls: Controls[RevertStop], *, settled: bool) -> ReleaseFound:
    """The release to undo (the one named, else the service's latest finished rollout); `settled`: under the lock."""
    try:
        found = await workflow.execute_activity_method(
            ReleaseActivities.find_release,
            ReleaseQuery(service=inp.service, rollout_id=inp.release, settled=settled, to_version=inp.to_version),
            summary=f"find the release of {inp.service} to undo", **options.RELEASE)
    except ActivityError as err:
        controls.halt(RevertStop("failed", f"nothing was deployed: could not read the release to undo "
                                           f"({error_text(err)})"))
        raise Stopped() from None
    if not found.found:
        problem = found.problem
        if not problem.startswith("release:"):
            problem = f"service: {problem}"
        raise NotRevertible(problem)
    return found


def take(found: ReleaseFound, inp: RevertInput, state: RevertState) -> RolloutRequest:
    """Check the input against the release and lay out its stages in `state`, last wave first; the release's request."""
    rid = found.rollout_id
    try:
        req = RolloutRequest.model_validate_json(json.dumps(found.request))
    except ValidationError:
        raise NotRevertible(f"release: the request of {rid} could not be read; name another with --release") from None
    stages = _stages(found, req)
    known = ({v for *_, v in stages if v} | set(found.earlier_versions)) - {req.version}
    keys = [f"{r}/{e}" for r, e, _, _ in stages]
    problems = []
    if inp.to_version == req.version:
        problems.append(f"to_version: {inp.to_version} is the version {rid} rolled out; go back to one it replaced "
                        f"({', '.join(sorted(known)) or 'none known'})")
    elif inp.to_version not in known:
        problems.append(f"to_version: {inp.to_version} is not a version {inp.service} ran before {rid}; versions to "
                        f"go back to: {', '.join(sorted(known)) or 'none known'}")
    unknown = [k for k in inp.stages if k not in keys]
    if unknown:
        problems.append(f"stages: {', '.join(unknown)} not in {rid}; its stages: {', '.join(keys)}")
    if problems:
        raise NotRevertible("; ".join(problems))
    state.release, state.release_version = rid, req.version
    state.known_versions = sorted(known)
    chosen = [(r, e, w) for r, e, w, _ in stages if not inp.stages or f"{r}/{e}" in inp.stages]
    state.regions = [RevertRegion(region=r, environment=e, wave=w)
                     for r, e, w in sorted(reversed(chosen), key=lambda s: -s[2])]
    return req


def _stages(found: ReleaseFound, req: RolloutRequest) -> list[tuple[str, EnvKind, int, str | None]]:
    """The release's stages (region, environment, wave, version before): from its final state, else its plan."""
    state: RolloutState | None = None
    if found.state is not None:
        try:
            state = RolloutState.model_validate(found.state)
        except ValidationError:
            state = None
    if state is not None and state.stages:
        return [(st.region, st.environment, st.wave, st.version_before) for st in state.stages]
    try:  # a final state without stages (the reader returns no run without a state of its own): its plan says
        plan = build_plan(req, now=workflow.now())
    except PlanError as err:
        raise NotRevertible(f"release: {found.rollout_id} left no state and its plan cannot be rebuilt ({err})") from None
    return [(s.region, s.environment, w.index, None) for w in plan.waves for s in w.stages]


async def read_versions(inp: RevertInput, state: RevertState, controls: Controls[RevertStop]) -> None:
    """Read the version every region runs before anything changes (its health is judged on that version)."""

    async def read(row: RevertRegion) -> None:
        row.version_before = row.version_now = await workflow.execute_local_activity_method(
            DeployActivities.current_version, StageOnly(stage=row.ref(inp.service)),
            summary=f"read version in {row.key}", **options.QUICK_LOCAL)

    outcomes = await asyncio.gather(*(read(r) for r in state.regions), return_exceptions=True)
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    if errors:
        controls.halt(RevertStop("failed", f"nothing was deployed: could not read the current versions: "
                                           f"{error_text(errors[0])}"))
        raise Stopped()
