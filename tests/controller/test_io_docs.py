"""The examples of docs/io.md run as printed."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "io.md").read_text()


def test_the_command_line_example_prints_what_the_docs_say():
    cmd = re.search(r"```sh\n(malleable simulate --workload .*?)\n```", DOC).group(1)
    printed = re.search(r"prints\n\n```text\n(.*?)```", DOC, re.S).group(1)
    p = subprocess.run([sys.executable, "-m", "malleable", *shlex.split(cmd)[1:]], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(printed) and p.stdout[len(printed):].startswith("simulated in")


def test_the_python_example_runs(monkeypatch):
    code = re.search(r"```python\n(.*?)```", DOC, re.S).group(1)
    monkeypatch.chdir(ROOT)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/io.md", "exec"), {})  # noqa: S102 - the documented example itself
    assert "stage-in" in out.getvalue() and "[  0.   0. 600.]" in out.getvalue()


def test_the_elastic_storage_example_prints_what_the_docs_say():
    part = DOC[DOC.index("## Elastic storage in the simulator"):]
    cmd = re.search(r"```sh\n(malleable simulate --workload .*?)\n```", part).group(1)
    printed = re.search(r"prints\n\n```text\n(.*?)```", part, re.S).group(1)
    assert "--storage-policy elastic" in cmd
    p = subprocess.run([sys.executable, "-m", "malleable", *shlex.split(cmd)[1:]], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(printed) and p.stdout[len(printed):].startswith("simulated in")
    static = subprocess.run([sys.executable, "-m", "malleable", *shlex.split(cmd)[1:-1], "static"],
                            capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert "mean wait    0.0 s" in static.stdout and "I/O          100 s in blocking" in static.stdout
