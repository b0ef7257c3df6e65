"""Search attributes every rollout keeps current, so the Temporal UI list can filter and show rollouts.

Register them (all Keyword) before any rollout runs: `bifrost server` does it for the embedded server;
docs/operating.md has the command for other servers.
"""

from temporalio.common import SearchAttributeKey

SERVICE = SearchAttributeKey.for_keyword("BifrostService")
VERSION = SearchAttributeKey.for_keyword("BifrostVersion")
STATUS = SearchAttributeKey.for_keyword("BifrostStatus")
STAGE = SearchAttributeKey.for_keyword("BifrostStage")  # the stage(s) in progress, e.g. "eu-west-1/prod"
ENVIRONMENT = SearchAttributeKey.for_keyword("BifrostEnvironment")  # the furthest environment changed: "prod", "test" or "-"
REQUESTED_BY = SearchAttributeKey.for_keyword("BifrostRequestedBy")

ALL = [SERVICE, VERSION, STATUS, STAGE, ENVIRONMENT, REQUESTED_BY]
