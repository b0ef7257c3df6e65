"""The Web UI link every notice carries and `bifrost` prints: the run's page with its Current Details."""

from __future__ import annotations

from common.links import LOCAL_UI_URL, cli_ui_url, workflow_link


def test_a_run_is_linked_on_its_current_details_tab_with_its_ids_encoded() -> None:
    assert workflow_link("https://ui.example/", "prod ns", "rollout/pay/2.0", "run-1") == \
        "https://ui.example/namespaces/prod%20ns/workflows/rollout%2Fpay%2F2.0/run-1/user-metadata"
    # without a run the UI resolves the latest one itself (and opens its default tab): the closest link there is
    assert workflow_link("https://ui.example", "default", "rollout/pay/2.0") == \
        "https://ui.example/namespaces/default/workflows/rollout%2Fpay%2F2.0"
    assert workflow_link(None, "default", "x", "r") is None
    assert workflow_link("javascript:alert(1)", "default", "x", "r") is None


def test_the_cli_links_the_ui_it_was_given_or_the_local_one_beside_the_local_server() -> None:
    assert cli_ui_url({"BIFROST_UI_URL": "https://temporal.example"}) == "https://temporal.example"
    assert cli_ui_url({"BIFROST_UI_URL": "https://temporal.example", "TEMPORAL_ADDRESS": "x:7233"}) == \
        "https://temporal.example"
    assert cli_ui_url({}) == LOCAL_UI_URL  # `bifrost server`'s UI beside the CLI's default address
    assert cli_ui_url({"TEMPORAL_ADDRESS": "temporal.prod:7233"}) is None  # a remote server: no guessed link
    assert cli_ui_url({"BIFROST_UI_URL": "not a url"}) is None
