"""The workflow kinds `bifrost list` shows and the statuses each can have, read from their models.

One place for both, so the list's query and its `--status` choices cannot drift apart: a status added to a
model's Literal is a choice at once.
"""

from __future__ import annotations

from typing import get_args

from common.types import RolloutStatus
from common.vocabulary import RevertStatus

ROLLOUT_WORKFLOW = "RolloutWorkflow"  # RolloutWorkflow's workflow type
REVERT_WORKFLOW = "RevertWorkflow"  # `bifrost revert`: listed beside the rollouts it undoes

# each listed workflow type, with the BifrostStatus values its model allows
LISTED: dict[str, tuple[str, ...]] = {
    ROLLOUT_WORKFLOW: get_args(RolloutStatus),
    REVERT_WORKFLOW: get_args(RevertStatus),
}


def listed_statuses() -> list[str]:
    """Every status a listed workflow can have, each once, in the models' order (rollouts' first)."""
    return list(dict.fromkeys(s for statuses in LISTED.values() for s in statuses))


def statuses_help() -> str:
    """`--status`'s help: which statuses belong to which kind."""
    kinds = "; ".join(f"{kind.removesuffix('Workflow').lower()}s: {', '.join(statuses)}"
                      for kind, statuses in LISTED.items())
    return f"only this Bifrost status ({kinds})"
