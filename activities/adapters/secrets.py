"""Secrets by reference: the targets file names an environment variable, activities read it when they need it.

Values never enter workflow inputs or results, so they never reach Temporal's history.
"""

from __future__ import annotations

import os


class SecretError(RuntimeError):
    """A referenced secret is not set in the worker's environment."""


def resolve_secret(env_name: str, purpose: str) -> str:
    """Read the secret held in `env_name`; raise a `SecretError` naming it and what needs it when it is unset."""
    value = os.environ.get(env_name)
    if not value:
        raise SecretError(
            f"{purpose}: environment variable {env_name} is not set or empty on this worker; "
            f"export it in the worker's environment (the targets file only names it)"
        )
    return value


def redact(text: str, *secrets: str | None) -> str:
    """Replace each secret value in `text` with '***', so error messages can quote URLs and responses safely."""
    for s in secrets:
        if s:
            text = text.replace(s, "***")
    return text
