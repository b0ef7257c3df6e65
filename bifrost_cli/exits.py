"""Exit codes of `bifrost`, shared by the commands and the client operations behind them."""

EXIT_OK, EXIT_ROLLED_BACK, EXIT_INVALID, EXIT_ABORTED, EXIT_UNREACHABLE = 0, 1, 2, 3, 4
EXIT_CODES_HELP = """\b
Exit codes:
  0  the rollout succeeded
  1  it was rolled back (failed judgement, soak alarm, deploy error)
  2  the request is invalid (nothing was deployed)
  3  it was aborted or rejected (or refused by the service lock)
  4  Temporal could not be reached
"""


def exit_code_for(status: str) -> int:
    """The exit code for a rollout's final status."""
    return {"succeeded": EXIT_OK, "aborted": EXIT_ABORTED, "rejected": EXIT_ABORTED}.get(status, EXIT_ROLLED_BACK)
# `bifrost revert` (bifrost_cli/revert.py)
REVERT_EXIT_CODES = """\b
Exit codes:
  0  every region is back on VERSION (or, without --wait, the revert started)
  1  it stopped part-way: a region was unhealthy on VERSION, a deploy or a
     traffic move failed (the message says which regions still run the release)
  2  refused before anything was deployed: unknown service, a version the
     service did not run before the release, a stage the release does not have
  3  refused because a rollout of the service runs (named), or aborted
  4  Temporal could not be reached
"""
