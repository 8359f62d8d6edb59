"""The shared secret of the controller and adhocfs: ``MALLEABLE_TOKEN`` or a 0600 key file made on first use."""

from __future__ import annotations

import logging
import os
import secrets
import stat
from pathlib import Path

from malleable.errors import AuthError

__all__ = ["key_file_path", "load_token"]

log = logging.getLogger(__name__)


def key_file_path() -> Path:
    """Where the key file lives: ``$MALLEABLE_KEY_FILE``, else ``$XDG_CONFIG_HOME/malleable/token``."""
    explicit = os.environ.get("MALLEABLE_KEY_FILE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "malleable" / "token"


def load_token(create: bool = True) -> bytes:
    """Return the shared secret.

    Args:
        create: make a new key file (mode 0600) when none exists and ``MALLEABLE_TOKEN`` is unset.

    Returns:
        The secret as bytes.

    Raises:
        AuthError: no secret is available, or the key file is readable by others.
    """
    env = os.environ.get("MALLEABLE_TOKEN")
    if env:
        return env.encode()
    path = key_file_path()
    if path.exists():
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            raise AuthError(f"key file {path} has mode {mode:o}; it must be 0600 (chmod 600 {path})")
        token = path.read_text().strip()
        if not token:
            raise AuthError(f"key file {path} is empty")
        return token.encode()
    if not create:
        raise AuthError(f"no shared secret: set MALLEABLE_TOKEN or create the key file {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(32)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    try:
        os.link(tmp, path)  # atomic: the first of several concurrent creators wins
    except FileExistsError:
        return load_token(create=False)
    finally:
        tmp.unlink()
    log.info("created key file %s (mode 0600)", path)
    return token.encode()
