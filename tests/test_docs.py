"""Docs run as printed: every shell block of README.md and docs/*.md is run, page by page, as a new user would
type it on this machine; a block that needs what a test machine may not have says so in its first line.

The conventions (docs/contributing.md, "Commands in the docs"):

* A fenced block in ``sh``/``bash`` is a script: it runs with ``set -e`` (its commands must succeed). A ``console``
  block (or one without a language that has ``$ `` lines) holds ``$ `` commands (a line ending in ``\\`` goes on in
  the next) and their output, which is not checked; each command must end with exit code 0 (show a failure as
  ``cmd; echo "exit code $?"``).
* ``# needs: WHAT`` as a block's first line (after a ``#!`` line) marks a block that needs something else: root,
  hosts (``malleable testbed up N``), the network, Slurm, a Dask scheduler, a whole trace; it is skipped, and the
  reader sees what it needs. Only :data:`NEEDS` words may start the list.
* ``# file: NAME`` as a block's first line (any language) writes the block to NAME before the next blocks run.
* A page's blocks run in order in one shell (variables carry over), in a fresh folder that holds links to the
  repository's files (``.venv`` links to the Python environment running the tests), with a fresh HOME, this
  Python's bin folder first on PATH and no MALLEABLE_* variable inherited. Whatever a page starts must be stopped
  by the page: processes left behind fail the test.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from tests._reach import closed_to_others

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
NEEDS = ("root", "hosts", "network", "slurm", "dask", "the whole")
SHELL = ("sh", "bash", "shell")
FENCE = re.compile(r"^```\s*([\w+-]*)\s*$")
MARK = re.compile(r"^#\s*(needs|file):\s*(.+?)\s*$")
PAGE_TIMEOUT = 900.0


@dataclass(frozen=True)
class Block:
    """One fenced block: where it starts (the line of its first content line), its language and its lines."""

    page: Path
    line: int
    lang: str
    lines: tuple[str, ...]

    def mark(self) -> tuple[str, str] | None:
        """``("needs", WHAT)`` or ``("file", NAME)`` from the block's first line (after a ``#!`` line)."""
        body = [x for x in self.lines if x.strip()]
        if body and body[0].startswith("#!"):
            body = body[1:]
        m = MARK.match(body[0].lstrip("$ ").strip()) if body else None
        return (m.group(1), m.group(2)) if m else None


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a Markdown page."""
    out, lang, start, body = [], None, 0, []
    for i, line in enumerate(page.read_text().splitlines(), 1):
        m = FENCE.match(line.strip()) if line.startswith("```") else None
        if lang is None and m:
            lang, start, body = m.group(1).lower(), i + 1, []
        elif lang is not None and line.strip() == "```":
            out.append(Block(page, start, lang, tuple(body)))
            lang = None
        elif lang is not None:
            body.append(line)
    assert lang is None, f"{page.name}: a fence opened at line {start - 1} is never closed"
    return out


def console_commands(b: Block) -> list[tuple[int, str]]:
    """The ``$ `` commands of a console block with their line numbers (continuation lines joined)."""
    cmds: list[tuple[int, str]] = []
    going = False
    for k, line in enumerate(b.lines):
        if going:
            cmds[-1] = (cmds[-1][0], cmds[-1][1] + "\n" + line)
        elif line.startswith("$ "):
            cmds.append((b.line + k, line[2:]))
        else:
            continue
        going = line.rstrip().endswith("\\")
    return cmds


def page_script(page: Path) -> tuple[str, dict[int, int], list[str]]:
    """The shell script of a page, the page line of each script line, and the blocks skipped (with why)."""
    script = ["set -o pipefail"]
    origin: dict[int, int] = {}
    skipped = []

    def add(text: str, line: int) -> None:
        for k, t in enumerate(text.split("\n")):
            script.append(t)
            origin[len(script)] = line + k

    for b in blocks(page):
        mark = b.mark()
        if mark and mark[0] == "needs":
            assert mark[1].startswith(NEEDS), f"{page.name}:{b.line}: '# needs:' starts with one of {NEEDS}"
            skipped.append(f"{page.name}:{b.line}: needs {mark[1]}")
            continue
        if mark and mark[0] == "file":
            text = "\n".join(x for x in b.lines if not MARK.match(x.strip())) + "\n"
            add(f"printf %s {shlex.quote(text)} > {shlex.quote(mark[1])}", b.line)
            continue
        if b.lang in SHELL:
            add("trap 'echo \"@@ERR $LINENO $?\" >&2' ERR; set -e", b.line)
            add("\n".join(b.lines), b.line)
            add("set +e; trap - ERR", b.line + len(b.lines) - 1)
        elif b.lang == "console" or (b.lang in ("", "text") and any(x.startswith("$ ") for x in b.lines)):
            for line, cmd in console_commands(b):
                add(cmd, line)
                first = len(script) - cmd.count("\n")          # the script line the command starts on
                add(f'__rc=$?; [ $__rc = 0 ] || {{ echo "@@ERR {first} $__rc" >&2; exit 1; }}', line + cmd.count("\n"))
    return "\n".join(script) + "\n", origin, skipped


def _marked(run: str) -> list[psutil.Process]:
    """Processes started by the page run ``run`` (they carry its marker in their environment)."""
    out = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("MALLEABLE_DOCS_RUN") == run:
                out.append(p)
        except psutil.Error:
            continue
    return out


def run_page(page: Path, tmp_path: Path) -> tuple[str | None, list[str]]:
    """Run a page's blocks as the module docstring says: (what failed, or None; the blocks skipped and why)."""
    script, origin, skipped = page_script(page)
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir(parents=True)
    home.mkdir(parents=True)
    for entry in REPO.iterdir():
        if entry.name not in (".git", ".venv"):
            (work / entry.name).symlink_to(entry)
    (work / ".venv").symlink_to(sys.prefix)          # the docs' .venv is the environment running the tests
    run = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLEABLE_", "PYTEST_", "VIRTUAL_ENV"))}
    env.update(HOME=str(home), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
               MALLEABLE_DOCS_RUN=run)
    (tmp_path / "page.sh").write_text(script)
    left: list[psutil.Process] = []
    out, err_file = tmp_path / "stdout", tmp_path / "stderr"
    try:   # into files, not pipes: a process the page leaves behind must not keep the test waiting
        with open(out, "w") as o, open(err_file, "w") as e:
            code = subprocess.run(["bash", str(tmp_path / "page.sh")], cwd=work, env=env, stdout=o, stderr=e,
                                  timeout=PAGE_TIMEOUT, stdin=subprocess.DEVNULL).returncode
    finally:
        deadline = time.monotonic() + 10
        while (left := _marked(run)) and time.monotonic() < deadline:
            time.sleep(0.2)
        names = [f"{q.pid} {' '.join(q.cmdline()[:4])}" for q in left if q.is_running()]
        for q in left:
            try:
                q.kill()
            except psutil.Error:
                pass
    stdout, stderr = out.read_text(errors="replace"), err_file.read_text(errors="replace")
    err = re.search(r"^@@ERR (\d+) (\d+)$", stderr, re.M)
    if err or code:
        line = origin.get(int(err.group(1)), 0) if err else 0
        text = page.read_text().splitlines()[line - 1].strip() if line else "?"
        return (f"{page.name}:{line}: exit code {err.group(2) if err else code}: {text}\n"
                f"--- stdout (end)\n{stdout[-3000:]}\n--- stderr (end)\n{stderr[-3000:]}"), skipped
    if names:
        return f"{page.name} left processes running: {', '.join(names)}", skipped
    return None, skipped


@pytest.mark.timeout(PAGE_TIMEOUT + 60)
@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_page_runs_as_printed(page, tmp_path):
    if "useradd" in page.read_text() and (why := closed_to_others()):
        pytest.skip(why)
    failed, skipped = run_page(page, tmp_path)
    if failed:
        pytest.fail(failed)
    print("\n".join(skipped))


def test_a_page_that_drifted_fails_at_its_line(tmp_path):
    """The harness itself: a file block is written, variables carry over, output lines are not run, a marked block
    is skipped, and the first command that fails is named with its line; a started process left behind fails."""
    page = tmp_path / "page.md"
    page.write_text("""# A page

```toml
# file: conf.toml
answer = 42
```

```sh
X=$(grep -c answer conf.toml)
```

```console
$ test "$X" = 1 && echo fine
fine
this line is output, not a command: exit 1
$ false; echo "exit code $?"
exit code 1
```

```sh
# needs: root (it would fail anyway)
false
```

```console
$ malleable no-such-command \\
    --really
```
""")
    failed, skipped = run_page(page, tmp_path / "a")
    assert skipped == ["page.md:21: needs root (it would fail anyway)"]
    assert failed is not None and failed.startswith("page.md:26: exit code 2: $ malleable no-such-command"), failed
    page.write_text("```sh\nsleep 600 &\n```\n")
    failed, _ = run_page(page, tmp_path / "b")
    assert failed is not None and failed.startswith("page.md left processes running: ") and "sleep 600" in failed


def test_the_conventions_are_written_down():
    """The marking convention this test reads is the one docs/contributing.md gives."""
    text = (REPO / "docs" / "contributing.md").read_text()
    assert "# needs:" in text and "# file:" in text
    assert all(word in text for word in NEEDS)
