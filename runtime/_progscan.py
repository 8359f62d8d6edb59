"""Can a command's program ever call ``init_adapt``? Read before ``malleable run`` starts it.

``malleable run -n N`` starts one anchor process whose ``init_adapt()`` spawns the other N - 1; a program that never
calls it would run as one process. A Python program can only call it through malleable, so a program whose source
(and the source of the local modules it imports, beside it) never imports ``malleable`` cannot: such a command is
refused before it starts. Anything else (another interpreter, a shell script, a program whose source cannot be
found) is given the benefit of the doubt and checked once it ran (``MALLEABLE_RUN_MARKER``).
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
from collections.abc import Sequence
from pathlib import Path

__all__ = ["never_imports_malleable"]

_PYTHON = re.compile(r"python(\d+(\.\d+)*)?$")
_OPTS_WITH_VALUE = {"-W", "-X", "--check-hash-based-pycs"}
_MAX_FILES = 200   # local modules read at most (a program with more is given the benefit of the doubt)


def never_imports_malleable(cmd: Sequence[str]) -> str | None:
    """The program of ``cmd`` (a file or ``-m`` module name) when it surely never imports malleable, else None."""
    src = _python_source(cmd)
    if src is None:
        return None
    name, first, root, own = src
    seen = {first}
    todo = [first]
    while todo:
        path = todo.pop()
        try:
            tree = ast.parse(path.read_text(errors="replace"))
        except (OSError, SyntaxError):
            return None                      # let Python say what is wrong with it
        for parts, level in _imports(tree):
            if parts is None or (not level and parts[0] == "malleable"):
                return None
            if not level and own and parts[0] != own:
                continue                     # another installed package: not this program's code
            base = root
            if level:
                base = path.parent
                for _ in range(level - 1):
                    base = base.parent
            for i in range(1, len(parts) + 1):   # a.b.c: a/__init__.py, a/b.py or a/b/__init__.py, ...
                stem = base.joinpath(*parts[:i])
                for f in (stem.with_suffix(".py"), stem / "__init__.py"):
                    if f.is_file() and f not in seen:
                        if len(seen) >= _MAX_FILES:
                            return None
                        seen.add(f)
                        todo.append(f)
    return name


def _imports(tree: ast.AST) -> list[tuple[list[str] | None, int]]:
    """(dotted name as parts, relative level) of every import anywhere in the module, inside functions too, and
    ``from M import N`` once more as ``M.N`` (N may be a module); None for a computed import (it may be anything)."""
    out: list[tuple[list[str] | None, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((a.name.split("."), 0) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            mod = node.module.split(".") if node.module else []
            if mod:
                out.append((mod, node.level))
            out.extend(([*mod, a.name], node.level) for a in node.names if a.name != "*")
        elif isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in (
                "import_module", "__import__"):
            arg = node.args[0] if node.args else None
            name = arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else "."
            out.append((None if name.startswith(".") else name.split("."), 0))
    return out


def _python_source(cmd: Sequence[str]) -> tuple[str, Path, Path, str] | None:
    """(name, file, folder its absolute imports start from, its own top package or '' for all that folder holds)
    of the Python program ``cmd`` runs, or None (not Python, or not found)."""
    if not cmd:
        return None
    exe = os.path.basename(cmd[0])
    if exe.endswith(".py") and os.path.isfile(cmd[0]):
        return _file(cmd[0])
    if not _PYTHON.match(exe):
        return None
    args = list(cmd[1:])
    while args:
        a = args.pop(0)
        if a in ("-c", "-m") or (a[:2] in ("-c", "-m") and len(a) > 2):
            value = a[2:] or (args[0] if args else "")
            return _module(value) if a.startswith("-m") else None   # -c: code on the command line, not read
        if a in _OPTS_WITH_VALUE:
            args = args[1:]
        elif not a.startswith("-") or a == "-":
            return _file(a) if a != "-" else None
    return None


def _file(path: str) -> tuple[str, Path, Path, str] | None:
    p = Path(path).resolve()
    if p.is_dir():
        p = p / "__main__.py"
    return (path, p, p.parent, "") if p.is_file() else None


def _module(name: str) -> tuple[str, Path, Path, str] | None:
    if not name or name.split(".")[0] == "malleable":
        return None
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        return None
    origin = Path(spec.origin)
    depth = name.count(".") + 1
    if spec.submodule_search_locations is not None:      # a package: python -m runs its __main__
        origin = origin.with_name("__main__.py")
        depth += 1
        if not origin.is_file():
            return None
    return f"-m {name}", origin, origin.parents[depth - 1], name.split(".")[0]
