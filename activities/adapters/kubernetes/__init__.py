"""Kubernetes deployer: `deployer` talks to the API server; `manifests` builds what it writes (pure)."""
