"""The mount session of docs/adhocfs.md runs as printed: command by command, output compared up to ports, pids,
times and column widths (it runs in a temporary folder holding a link to the repository's examples, so its mount
folder ``adhoc`` is a temporary one)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mount_util import need_fuse, no_leaked_mounts  # noqa: F401 - fixture

from tests.conftest import REPO

pytestmark = pytest.mark.usefixtures("no_leaked_mounts")


DOC_ABS = "/home/me/malleable/adhoc"  # the mount folder's absolute path as the documented session printed it


def _steps() -> list[tuple[str, str]]:
    text = (REPO / "docs" / "adhocfs.md").read_text()
    block = re.search(r"```console\n(.*?)```", text.split("## Mount: unmodified programs (FUSE)", 1)[1], re.S)
    steps: list[tuple[str, list[str]]] = []
    for line in block.group(1).splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    return [(cmd, "\n".join(out)) for cmd, out in steps]


def _norm(text: str, where: str) -> str:
    text = text.replace(where, "adhoc").replace(DOC_ABS, "adhoc")
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", text)
    text = re.sub(r"pid \d+", "pid PID", text)
    text = re.sub(r"mounts/[0-9a-f]+\.log", "mounts/LOG.log", text)
    text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d(:\d\d)?", "TIME", text)
    text = re.sub(r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d", "TIME", text)
    return "\n".join(" ".join(line.split()) for line in text.strip().splitlines())


def test_mount_session_in_the_docs_runs(tmp_path):
    need_fuse()
    where = str(tmp_path / "adhoc")
    (tmp_path / "examples").symlink_to(REPO / "examples")
    steps = _steps()
    assert steps[0][0].startswith("export MALLEABLE_TOKEN") and steps[-1][0] == "malleable fs stop"
    script = ["set -u"]
    for i, (cmd, _) in enumerate(steps):
        script += [f"echo '@@@ {i}'", f"{{ {cmd} ; }} 2>&1 < /dev/null"]
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    env.pop("MALLEABLE_FS", None)
    done = None
    try:
        done = subprocess.run(["bash", "-c", "\n".join(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=240)
    finally:  # a step that failed before the session's umount and stop: clean up after it
        subprocess.run(["fusermount3", "-uz", where], capture_output=True)
        addr = re.search(r"mounted (tcp://\S+)", done.stdout if done else "")
        if addr and "stopped" not in done.stdout:
            subprocess.run([sys.executable, "-m", "malleable", "fs", "stop", "--meta", addr.group(1)], env=env,
                           capture_output=True, timeout=60)
    outputs = re.split(r"^@@@ \d+\n", done.stdout, flags=re.M)[1:]
    assert len(outputs) == len(steps), done.stdout + done.stderr
    for (cmd, want), got in zip(steps, outputs, strict=True):
        assert _norm(got, where) == _norm(want, where), cmd
