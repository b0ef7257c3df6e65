"""Connection settings come from the Temporal CLI's environment variables."""

from worker.connect import connect_config


def test_address_and_namespace_from_environment(monkeypatch):
    monkeypatch.setenv("TEMPORAL_ADDRESS", "temporal.example:7233")
    monkeypatch.setenv("TEMPORAL_NAMESPACE", "deploys")
    cfg = connect_config()
    assert cfg["target_host"] == "temporal.example:7233" and cfg["namespace"] == "deploys"


def test_api_key_turns_tls_on_but_an_empty_one_does_not(monkeypatch):
    monkeypatch.setenv("TEMPORAL_API_KEY", "secret-key")
    cfg = connect_config()
    assert cfg["api_key"] == "secret-key" and cfg.get("tls") is not False
    monkeypatch.setenv("TEMPORAL_API_KEY", "")
    cfg = connect_config()
    assert "api_key" not in cfg and cfg.get("tls") in (None, False)


def test_explicit_arguments_win(monkeypatch):
    monkeypatch.setenv("TEMPORAL_ADDRESS", "a:1")
    assert connect_config("b:2", "ns")["target_host"] == "b:2"
