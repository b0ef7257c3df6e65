"""Browser tests: headless Chromium drives the real Temporal Web UI against a running rollout."""
