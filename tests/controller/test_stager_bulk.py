"""The stager on trees of many small files, through its real child process and real adhocfs servers: files written
by the bulk requests (more than one batch) and staged out with one sync per group of files (more than one group)
come back byte for byte, a second stage-in replaces what the first wrote, and a stage-out whose rename fails for one
file keeps every other file complete, leaves no temporary file and reports that file."""

from __future__ import annotations

import os
import random

import pytest

from malleable.controller.daemon._streams import COMMIT_FILES
from tests.controller._stager_util import SECRET, stager_fs

dep = stager_fs  # this module's tests take it as `dep`


def _tree(root, rng, n):
    files = {}
    for i in range(n):
        rel = f"d{i % 7}/{'deep/' if i % 5 == 0 else ''}f{i:04d}"
        files[rel] = rng.randbytes(rng.choice((0, 1, 100, 4096, 40_000, (1 << 20) + 1)) if i % 50 == 0
                                   else rng.randrange(1, 9000))
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(files[rel])
    return files


def _local(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.timeout(180)
def test_a_tree_of_many_small_files_round_trips_and_a_second_stage_in_replaces_it(dep, tmp_path):
    from malleable.controller.daemon._stager import run

    rng = random.Random(11)
    n = 2 * COMMIT_FILES + 50
    files = _tree(tmp_path / "src", rng, n)
    got = run(dep.address, SECRET, "in", [(f"{tmp_path}/src/", "/data/")])
    assert [(s.size, s.error) for s in got] == [(sum(map(len, files.values())), "")]
    for rel in list(files)[::3]:                                   # change a third of the files, stage in again
        files[rel] = files[rel][::-1] + b"again"
        (tmp_path / "src" / rel).write_bytes(files[rel])
    assert run(dep.address, SECRET, "in", [(f"{tmp_path}/src/", "/data/")])[0].error == ""
    got = run(dep.address, SECRET, "out", [("/data", f"{tmp_path}/back")])
    assert [(s.size, s.error) for s in got] == [(sum(map(len, files.values())), "")]
    assert _local(tmp_path / "back") == files
    assert not [p for p in (tmp_path / "back").rglob(".*")]       # no temporary file left


@pytest.mark.timeout(180)
def test_a_stage_out_whose_rename_fails_keeps_the_other_files_and_leaves_no_temporary_file(dep, tmp_path):
    from malleable.controller.daemon._stager import run

    rng = random.Random(12)
    files = _tree(tmp_path / "src", rng, 300)
    assert run(dep.address, SECRET, "in", [(f"{tmp_path}/src/", "/data/")])[0].error == ""
    blocked = "d4/f0011"
    assert blocked in files
    (tmp_path / "back" / blocked / "inside").mkdir(parents=True)     # a folder, not empty, where a file goes
    got = run(dep.address, SECRET, "out", [("/data", f"{tmp_path}/back")])
    assert got[0].size == 0 and f"{tmp_path}/back/{blocked}" in got[0].error, got
    back = _local(tmp_path / "back")
    assert not [p for p in (tmp_path / "back").rglob(".*")]
    assert blocked not in back and (tmp_path / "back" / blocked / "inside").is_dir()
    assert back and all(files[rel] == body for rel, body in back.items())   # only complete files, none partial
    os.rmdir(tmp_path / "back" / blocked / "inside")
    os.rmdir(tmp_path / "back" / blocked)
    assert run(dep.address, SECRET, "out", [("/data", f"{tmp_path}/back")])[0].error == ""     # a retry completes
    assert _local(tmp_path / "back") == files
