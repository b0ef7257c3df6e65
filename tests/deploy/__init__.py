"""Checks of the deploy/ folder: Kubernetes manifests, the CI example and the Dockerfile."""
