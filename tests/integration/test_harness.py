"""The integration harness itself: missing components skip on a laptop and fail in CI."""

from __future__ import annotations

import pytest

from tests.conftest import require_or_skip


def test_a_missing_component_skips_on_a_laptop(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("BIFROST_REQUIRE_INTEGRATION", raising=False)
    with pytest.raises(pytest.skip.Exception, match="Prometheus unavailable: not installed"):
        require_or_skip("Prometheus", "not installed")


def test_a_missing_component_fails_in_ci(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("BIFROST_REQUIRE_INTEGRATION", "1")
    with pytest.raises(pytest.fail.Exception, match="Prometheus is required .* not installed"):
        require_or_skip("Prometheus", "not installed")
