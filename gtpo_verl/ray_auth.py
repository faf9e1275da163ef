"""Ray token authentication (Ray >= 2.52, ``RAY_AUTH_MODE=token``): where a process's token comes
from, and a fresh one for a cluster that makes its own (the CPU cluster demo, the tests)."""

from __future__ import annotations

import os
import secrets
from typing import Optional


def token_source() -> Optional[str]:
    """Where Ray would read this process's token from (Ray's order), or None when there is none."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return "RAY_AUTH_TOKEN"
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if path:
        return f"RAY_AUTH_TOKEN_PATH={path}"
    default = os.path.expanduser("~/.ray/auth_token")
    return default if os.path.isfile(default) else None


def write_token(folder: str) -> str:
    """A fresh 256-bit token (what `ray get-auth-token --generate` makes) in ``folder/auth_token``,
    created readable by its owner only; returns the path."""
    path = os.path.join(folder, "auth_token")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    return path
