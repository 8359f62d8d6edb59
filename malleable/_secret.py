"""Secrets: the shared secret of the controller's operator and of adhocfs (``MALLEABLE_TOKEN`` or a 0600 key file
made on first use), and personal keys (a user's or a job's controller key: ``MALLEABLE_KEY`` or the user's 0600
key file), which carry the id the controller knows them by."""

from __future__ import annotations

import logging
import os
import re
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path

from malleable.errors import AuthError

__all__ = ["KEY_ENV", "Credential", "key_file_path", "load_credential", "load_token", "parse_credential",
           "user_key_path"]

KEY_ENV = "MALLEABLE_KEY"
"""The environment variable holding a personal key (``KIND:NAME:SECRET``); a job's environment carries its own."""

_CREDENTIAL = re.compile(r"(?P<kid>(?:user|job):[A-Za-z0-9_.-]{1,40}):(?P<secret>[0-9a-f]{64})")

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


@dataclass(frozen=True)
class Credential:
    """Who a client speaks as: ``key_id`` "" is the operator (the shared secret), ``user:NAME`` a user's key,
    ``job:ID`` a job's key; ``secret`` is never shown by ``repr``."""

    key_id: str
    secret: bytes = field(repr=False)

    @property
    def text(self) -> str:
        """The one-line form a key file or ``MALLEABLE_KEY`` holds (``KIND:NAME:SECRET``)."""
        return f"{self.key_id}:{self.secret.decode()}" if self.key_id else self.secret.decode()


def parse_credential(text: str, where: str = KEY_ENV) -> Credential:
    """A personal key from its one-line form ``user:NAME:HEX`` or ``job:ID:HEX``.

    Raises:
        AuthError: not such a line (``where`` names its source).
    """
    m = _CREDENTIAL.fullmatch(text.strip())
    if not m:
        raise AuthError(f"{where} is not a malleable key (expected user:NAME:SECRET or job:ID:SECRET, as "
                        "'malleable controller add-user' prints it)")
    return Credential(m["kid"], m["secret"].encode())


def user_key_path() -> Path:
    """Where a user keeps the personal key the operator gave them: ``$XDG_CONFIG_HOME/malleable/user-key``."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "malleable" / "user-key"


def load_credential() -> Credential:
    """The key a controller client speaks with, first found of: ``MALLEABLE_KEY`` (a personal key: a job's
    environment carries its own), ``MALLEABLE_TOKEN`` (the operator), the user's key file
    (:func:`user_key_path`, mode 0600), the shared secret's key file (the operator).

    Raises:
        AuthError: a malformed key, a key file others can read, or no key at all.
    """
    env = os.environ.get(KEY_ENV)
    if env:
        return parse_credential(env)
    if os.environ.get("MALLEABLE_TOKEN"):
        return Credential("", load_token(create=False))
    path = user_key_path()
    if path.exists():
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            raise AuthError(f"key file {path} has mode {mode:o}; it must be 0600 (chmod 600 {path})")
        return parse_credential(path.read_text(), str(path))
    return Credential("", load_token(create=False))
