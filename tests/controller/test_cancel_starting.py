"""A job cancelled while its launcher is still starting it ends by the SIGTERM (``0:15``) at once, not by the SIGKILL
after the whole kill wait: the processes that appear after the first SIGTERM get theirs, each once. Cancelled at
each stage of the start (the shepherd only, mpiexec up, its proxy up, the program up) against a real daemon."""

from __future__ import annotations

import pytest

from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._hostpool import HostPool, scan_tagged
from tests.controller._daemon_util import cli, daemon_thread, isolate, wait_final, wait_for

pytestmark = pytest.mark.timeout(180)

KILL_WAIT = 120.0       # far beyond the waits below: a job the SIGKILL ends fails the test


@pytest.mark.parametrize("stage", ["launched", "mpiexec", "hydra_pmi_proxy", "sleep"])
def test_a_job_cancelled_while_it_starts_ends_by_sigterm(stage, monkeypatch, tmp_path):
    env = isolate(monkeypatch, tmp_path)
    with daemon_thread(env / "ctl.sqlite", HostPool.local(1), kill_wait=KILL_WAIT) as (d, c):
        for _ in range(3):
            jid = c.submit(["sleep", "300"], nodes=1, cwd=str(env))
            wait_for(lambda: jid in d.procs, 60, "the launch", every=0.002)
            if stage != "launched":
                tag = d.tag(jid)
                wait_for(lambda: any(p.name == stage for p in scan_tagged(tag).get(tag, [])), 60, stage,
                         every=0.002)
            c.call(P.Cancel(jid))
            assert wait_final(c, [jid], KILL_WAIT / 3)[jid] == "CANCELLED"
            row = next(r for r in c.rows(P.History(0)) if r["id"] == jid)
            assert (row["exit_code"], row["killed_at"]) == (128 + 15, 0.0), row
            code, out, _ = cli("info", "--controller", c.address, str(jid), "--events", "0")
            assert code == 0 and out.splitlines()[0].endswith(" ExitCode=0:15"), out
