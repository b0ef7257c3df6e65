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
