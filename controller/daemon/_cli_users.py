"""The operator's user commands, as sacctmgr's habits go: ``controller add-user NAME [--key-file F]``,
``controller users``, ``controller remove-user NAME``. A user's key is derived in the command itself from the
operator's secret and a fresh nonce (only the nonce goes to the daemon); it is printed, or written to a 0600 file
given to the user."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from malleable.errors import ConfigError

from ._identity import UnixUser, write_private

__all__ = ["add_user_parsers", "write_key"]

Command = Callable[[argparse.Namespace], int]


def add_user_parsers(csub: Any, client_opts: Callable[[Any], None], wrap: Callable[[Command], Command],
                     file_arg: Callable[..., None]) -> None:
    """Add ``add-user``, ``users`` and ``remove-user`` under ``controller`` (``client_opts`` adds the daemon
    options, ``wrap`` makes failures one line, ``file_arg`` declares a file-name option)."""
    p = csub.add_parser("add-user", help="give a user a key (operator only; like sacctmgr add user)",
                        description="Give user NAME a key to submit, watch and cancel their own jobs. The key is "
                                    "printed (or written to --key-file, mode 0600); adding a user again gives a new "
                                    "key and the old one stops working. The user keeps it in "
                                    "~/.config/malleable/user-key or in MALLEABLE_KEY.",
                        epilog="example: malleable controller add-user ann --key-file /home/ann/.config/malleable/"
                               "user-key")
    client_opts(p)
    p.add_argument("name", metavar="NAME", help="the user's Unix login name (not root, not your own)")
    file_arg(p, "--key-file", metavar="FILE", help="write the key here (mode 0600, owned by NAME when run as root; "
                                                   "never through a link) instead of printing it")
    p.set_defaults(func=wrap(_add_user))

    p = csub.add_parser("users", help="the users and when they got their key (operator only)")
    client_opts(p)
    p.add_argument("--json", action="store_true", help="a JSON document with a schema number")
    p.set_defaults(func=wrap(_users))

    p = csub.add_parser("remove-user", help="revoke a user's key (operator only; their jobs go on)")
    client_opts(p)
    p.add_argument("name", metavar="NAME")
    p.set_defaults(func=wrap(_remove_user))


def _client(args: argparse.Namespace) -> Any:
    from ._client import Client

    return Client(args.controller, args.state, timeout=args.timeout)


def _add_user(args: argparse.Namespace) -> int:
    from ._identity import refuse_name, unix_user
    from ._protocol import USER_NAME

    if not USER_NAME.fullmatch(args.name):
        raise ConfigError(f"bad user name {args.name!r}: a login name (letters, digits, _ . -; at most 32, not "
                          "starting with a digit, dot or dash)")
    who = unix_user(args.name)
    if who is None:
        raise ConfigError(f"no Unix user {args.name} on this host: controller users are Unix users (useradd first)")
    why = refuse_name(args.name)
    if why:
        raise ConfigError(why)
    if args.key_file and os.path.isdir(args.key_file):
        raise ConfigError(f"--key-file {args.key_file} is a directory")
    with _client(args) as c:
        key = c.add_user(args.name)
    if not args.key_file:
        print(key.text)
        print(f"give this key to {args.name}: keep it in ~/.config/malleable/user-key (mode 0600) or in "
              "MALLEABLE_KEY", file=sys.stderr)
        return 0
    owner = write_key(args.key_file, key.text, who)
    print(f"wrote the key of {args.name} to {args.key_file} (mode 0600{', owner ' + owner if owner else ''})")
    return 0


def write_key(path: str, text: str, who: UnixUser) -> str:
    """Write a key file readable by its owner only (``who``, when we run as root and may give it away), never
    through a link (:func:`._identity.write_private`); returns the owner set, or ""."""
    write_private(path, (text + "\n").encode(), who)
    return who.name if os.geteuid() == 0 else ""


def _users(args: argparse.Namespace) -> int:
    from ._cli_views import document

    with _client(args) as c:
        rows = c.users()
    if args.json:
        print(json.dumps(document("users", rows), indent=2))
        return 0
    print(f"{'USER':<32} ADDED")
    for r in rows:
        print(f"{r['name']:<32} {time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(r['added']))}")
    return 0


def _remove_user(args: argparse.Namespace) -> int:
    with _client(args) as c:
        c.remove_user(args.name)
    print(f"removed user {args.name}: their key no longer works")
    return 0
