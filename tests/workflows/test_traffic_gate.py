"""The facts a rollout holds a wave on, and a stage discards a window on (workflows/traffic_gate.py), without a server."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from workflows.guard.models import guard_id
from workflows.traffic_gate import GUARD_PREFIX, TrafficFacts

T0 = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
EVEN = {"us-east-1": 100, "eu-west-1": 100, "ap-south-1": 100}


def test_a_region_without_a_traffic_target_is_never_held() -> None:
    facts = TrafficFacts(weights={"us-east-1": 100}, total=100, moving="evacuate of us-east-1 by alice, shifting")
    assert facts.why_not("eu-west-1") == "" and facts.moved_since("eu-west-1", T0) == ""


def test_an_evacuated_region_is_held_and_a_serving_one_is_not() -> None:
    facts = TrafficFacts(weights={**EVEN, "eu-west-1": 0}, total=200)
    assert facts.why_not("eu-west-1") == "eu-west-1: evacuated (weight 0 of 200)"
    assert facts.why_not("us-east-1") == ""


def test_a_running_change_holds_the_regions_it_moves_only() -> None:
    facts = TrafficFacts(weights=EVEN, total=300, moving="evacuate of ap-south-1 by alice, shifting",
                         moved_regions=["ap-south-1", "us-east-1"])
    assert "traffic is moving (evacuate of ap-south-1" in facts.why_not("us-east-1")
    assert facts.why_not("eu-west-1") == ""  # not a receiver of this change


def test_the_guard_keeps_out_a_region_it_probes() -> None:
    facts = TrafficFacts(weights={**EVEN, "eu-west-1": 10}, total=210,
                         guard_out={"eu-west-1": "being restored by the region guard (probe)"})
    assert facts.why_not("eu-west-1") == "eu-west-1: being restored by the region guard (probe)"


def test_unreadable_weights_hold_every_region() -> None:
    facts = TrafficFacts(unread="Route 53 throttled")
    assert facts.why_not("eu-west-1") == "eu-west-1: its traffic could not be read (Route 53 throttled)"


def test_a_window_is_discarded_only_for_a_change_inside_it() -> None:
    done = TrafficFacts(weights=EVEN, total=300, moved_regions=["ap-south-1", "eu-west-1"], last_change=T0)
    assert done.moved_since("eu-west-1", T0 - timedelta(seconds=1)).startswith("a traffic step applied at 02:00:00")
    assert done.moved_since("eu-west-1", T0 + timedelta(seconds=1)) == ""  # the change was before the window
    assert done.moved_since("us-east-1", T0 - timedelta(seconds=1)) == ""  # not moved by it


def test_the_guard_id_read_is_the_guards_own() -> None:
    assert GUARD_PREFIX + "payments" == guard_id("payments")


@pytest.mark.process
def test_the_rollout_workflow_does_not_import_the_statistics() -> None:
    # the CLI imports the workflows; the guard's judgement (numpy, scipy) is loaded by the worker only
    code = "import sys, workflows.rollout, workflows.stage; print(sorted(m for m in ('numpy', 'scipy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
