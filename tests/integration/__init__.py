"""Adapter tests against real servers: Prometheus, moto, the fake kube API and the Temporal dev server."""
