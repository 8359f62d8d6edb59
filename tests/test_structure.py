"""The package's shape: no import cycles, modules under 600 lines, each room importing only what its role needs,
no tracker references in code or user docs."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = {"malleable": "malleable", "malleable.runtime": "runtime", "malleable.controller": "controller",
            "malleable.adhocfs": "adhocfs", "malleable.apps": "apps", "malleable.launch": "launch"}


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name."""
    out: dict[str, Path] = {}
    for pkg, folder in PACKAGES.items():
        for f in sorted((REPO / folder).rglob("*.py")):
            rel = f.relative_to(REPO / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([pkg, *parts])] = f
    return out


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Modules of the package that ``name`` imports at import time (not inside functions, not for type checking)."""
    tree = ast.parse(path.read_text())
    pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()

    def target(mod: str | None, level: int) -> str | None:
        if level == 0:
            return mod
        base = pkg.split(".")
        base = base[: len(base) - (level - 1)]
        return ".".join(base + ([mod] if mod else []))

    for node in tree.body:                      # module level only
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            continue
        for sub in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                else []:
            if isinstance(sub, ast.Import):
                names = [a.name for a in sub.names]
            elif isinstance(sub, ast.ImportFrom):
                t = target(sub.module, sub.level)
                names = [t] + [f"{t}.{a.name}" for a in sub.names] if t else []
            else:
                continue
            for n in names:
                while n and n not in known:
                    n = n.rpartition(".")[0]
                if n and n != name:
                    found.add(n)
    return found


def test_no_import_cycles():
    mods = modules()
    graph = {n: imports_of(n, p, set(mods)) for n, p in mods.items()}
    # a package's __init__ importing its own submodules is not a cycle when the submodule imports siblings
    seen: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(n: str) -> None:
        seen[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if m.startswith(n + ".") or n.startswith(m + "."):
                continue                    # parent package <-> its own submodule
            if seen.get(m) == 1:
                cycles.append(stack[stack.index(m):] + [m])
            elif m not in seen:
                visit(m)
        stack.pop()
        seen[n] = 2

    for n in sorted(graph):
        if n not in seen:
            visit(n)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_modules_stay_under_600_lines():
    big = {str(p.relative_to(REPO)): n for p in modules().values() if (n := len(p.read_text().splitlines())) > 600}
    assert not big, f"modules over 600 lines: {big}"


def test_the_scheduling_contract_imports_no_engine_or_daemon():
    mods = modules()
    for name, path in mods.items():
        if name.startswith("malleable.controller.sched"):
            bad = {m for m in imports_of(name, path, set(mods))
                   if m.startswith(("malleable.controller.sim", "malleable.controller.daemon",
                                    "malleable.controller.experiments"))}
            assert not bad, f"{name} imports {bad}"


def loaded_after(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json\n"
                          "print(json.dumps(sorted(m for m in sys.modules)))"],
                         capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_a_controlled_rank_loads_no_policy_engine_plot_or_trace_reader():
    mods = loaded_after("import malleable.runtime, malleable.runtime._link")
    ours = [m for m in mods if m.startswith("malleable.controller")]
    allowed = {"malleable.controller", "malleable.controller.daemon", "malleable.controller.daemon._protocol",
               "malleable.controller.sched", "malleable.controller.sched._model", "malleable.controller.sched._speedup",
               "malleable.controller.sched._depend",     # the wire's checks of submit (pure, no import of its own)
               "malleable.controller.daemon._fsspec"}   # the submit check of the file-system options (pure)
    assert set(ours) <= allowed, f"a job's rank 0 loads {sorted(set(ours) - allowed)}"
    assert not {"matplotlib", "mpi4py.MPI"} & set(mods)


def test_a_joiner_loads_only_what_it_needs_before_it_merges():
    # every module a joiner imports before it can answer its parents lies on every expansion's path
    setup = "import mpi4py\nmpi4py.rc.initialize = mpi4py.rc.finalize = False\nfrom mpi4py import MPI\n"
    before = set(loaded_after(setup))
    joiner = set(loaded_after(setup + "from malleable import runtime\nfrom malleable.runtime import _world\n"
                                      "_world._mpi.current()"))
    assert "malleable.runtime._spawn" in joiner - before
    parents_only = {f"malleable.runtime.{m}" for m in ("_decide", "_requests", "_registered", "_bounds", "_plan",
                                                        "_sources", "_expand", "_redistribute", "epop")}
    heavy = {"typing", "socket", "logging", "numpy", "encodings.idna", "dataclasses", "inspect"}
    assert not (joiner - before) & (parents_only | heavy), sorted((joiner - before) & (parents_only | heavy))


@pytest.mark.parametrize("argv", [["--help"], ["queue", "--help"], ["submit", "--help"]])
def test_the_command_line_builds_its_parsers_without_the_parts(argv):
    mods = loaded_after("import malleable.cli\nmalleable.cli.build_parser()")
    heavy = [m for m in mods if m.startswith(("malleable.controller.sim.", "malleable.controller.sched.",
                                              "malleable.controller.daemon._core", "malleable.adhocfs._",
                                              "numpy", "matplotlib", "mpi4py.MPI"))
             and not m.startswith(("malleable.adhocfs._cli", "malleable.controller.sim._cli"))]
    assert not heavy, f"building the parsers loads {heavy}"


def test_no_tracker_references_in_code_or_user_docs():
    pat = re.compile(r"\b[Ii]ssues? #?\d+")
    files = [p for p in modules().values()] + sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]
    files += sorted((REPO / "benchmarks").glob("*.py")) + sorted((REPO / "examples").glob("*.py"))
    hits = [f"{p.relative_to(REPO)}:{i}" for p in files for i, line in enumerate(p.read_text().splitlines(), 1)
            if pat.search(line)]
    assert not hits, f"tracker references: {hits[:10]}"


def test_nothing_reaches_outside_the_repository():
    """A clone alone runs: no tracked file names the folder beside the checkout that development had."""
    beside = ".." + "/shared"
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, timeout=60)
    if out.returncode:
        pytest.skip("not a git checkout")
    hits = []
    for name in out.stdout.splitlines():
        p = REPO / name
        if p.suffix in (".py", ".md", ".toml", ".sh", ".txt", ".cfg", "") and p.is_file():
            text = p.read_bytes()
            if b"\0" not in text[:4096] and beside.encode() in text:
                hits.append(name)
    assert not hits, f"files naming {beside}: {hits}"
