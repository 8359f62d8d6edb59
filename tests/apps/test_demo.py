"""``malleable demo`` (1 -> 2 -> 4 -> 2 Jacobi, checked against serial NumPy) and examples/jacobi_verbs.py."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pytest

from malleable.apps import _cli, jacobi
from malleable.errors import ConfigError
from tests.apps._helpers import malleable_run

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "jacobi_verbs.py"


def demo_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="malleable")
    _cli.register(parser.add_subparsers())
    return parser.parse_args(["demo", *argv])


def test_demo_plan():
    assert _cli.demo_plan(400) == [{"at_probe": 101, "procs": 2}, {"at_probe": 201, "procs": 4},
                                   {"at_probe": 301, "procs": 2}]


def test_demo_grows_shrinks_and_passes(capsys, tmp_path):
    args = demo_args("--n", "48", "--iters", "40", "--keep", str(tmp_path))
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and "FAIL" not in out
    rows = [line.split() for line in out.splitlines() if line.startswith("solve")]
    assert [int(r[1]) for r in rows] == [1, 2, 4, 2] and [int(r[2]) for r in rows] == [10, 10, 10, 10]
    assert "expand 1 -> 2 before iteration 10" in out and "shrink 4 -> 2 before iteration 30" in out
    assert np.array_equal(np.load(tmp_path / "u.npy"), jacobi.reference(48, 40))


@pytest.mark.netns
def test_demo_spreads_over_namespace_hosts(capsys, netns_cluster):
    args = demo_args("--n", "40", "--iters", "24", "--hosts", ",".join(netns_cluster.hosts),
                     "--launcher-exec", netns_cluster.launcher)
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "PASS" in out
    final = next(line for line in out.splitlines() if line.startswith("final processes on hosts"))
    assert all(h.strip() in netns_cluster.hosts for h in final.split(":", 1)[1].split(","))


@pytest.mark.parametrize("argv, message", [(["--iters", "5"], "--iters must be >= 8"),
                                           (["--n", "2"], "--n must be >= 3"),
                                           (["--timeout", "0"], "--timeout must be > 0")])
def test_demo_bad_options(argv, message):
    args = demo_args(*argv)
    with pytest.raises(ConfigError, match=message):
        args.func(args)


def test_demo_non_numeric_option_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        demo_args("--n", "big")
    assert e.value.code == 2 and "argument --n: invalid int value" in capsys.readouterr().err


def test_verbs_example_fits_a_screen_and_is_exact(tmp_path):
    assert len(EXAMPLE.read_text().splitlines()) <= 80
    out = tmp_path / "u.npy"
    plan = [{"at_probe": 8, "procs": 3}, {"at_probe": 20, "procs": 2}, {"at_probe": 25, "procs": 1}]
    proc = malleable_run(1, [sys.executable, str(EXAMPLE), "30", "32", str(out)], plan)
    assert "procs=1" in proc.stdout
    assert np.array_equal(np.load(out), jacobi.reference(30, 32))


@pytest.mark.parametrize("argv", [[], ["64", "100"], ["big", "100", "u.npy"], ["2", "10", "u.npy"]])
def test_verbs_example_without_its_arguments_prints_its_usage(argv):
    import subprocess

    p = subprocess.run([sys.executable, str(EXAMPLE), *argv], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr == "usage: python examples/jacobi_verbs.py N ITERATIONS OUT.npy  (an N x N grid, N >= 3)\n"


def test_demo_is_a_malleable_subcommand(capsys):
    from malleable.cli import build_parser

    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["demo", "--help"])
    assert e.value.code == 0 and "grows it to 2 and 4 processes" in capsys.readouterr().out
