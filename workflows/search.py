"""Search attributes every rollout sets, so the Temporal UI list can filter rollouts."""

from temporalio.common import SearchAttributeKey

SERVICE = SearchAttributeKey.for_keyword("BifrostService")
VERSION = SearchAttributeKey.for_keyword("BifrostVersion")
STATUS = SearchAttributeKey.for_keyword("BifrostStatus")
STAGE = SearchAttributeKey.for_keyword("BifrostStage")
REQUESTED_BY = SearchAttributeKey.for_keyword("BifrostRequestedBy")

ALL = [SERVICE, VERSION, STATUS, STAGE, REQUESTED_BY]
