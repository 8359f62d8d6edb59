"""Views safe for a terminal: control characters and bidirectional overrides in a job's name, command and paths
are escaped in every text view (queue, history with and without -o, info with its events, the errors that quote
them) while --json keeps them exact; and secret-looking variables (DB_PASSWD, GH_PAT, PGPASS, a password inside
DATABASE_URL) never reach the job nor the state file."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from malleable.controller.daemon._access import secret_looking
from malleable.controller.daemon._hostpool import HostPool
from tests.controller._daemon_util import cli, daemon_thread, isolate, wait_final

pytestmark = pytest.mark.timeout(120)

EVIL = "ok\x1b[2J\x1b]0;pwned\x07\rforged line\n\u202eexe.txt\x9b31m"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")   # anything but \t and \n, raw


@pytest.fixture
def env(monkeypatch, tmp_path):
    return isolate(monkeypatch, tmp_path)


def test_control_characters_are_escaped_in_text_views_and_exact_in_json(env):
    state = str(env / "ctl.sqlite")
    with daemon_thread(env / "ctl.sqlite", HostPool.local(1)) as (d, c):
        out = env / ("out\x1b[1m" + ".txt")
        jid = c.submit(["sh", "-c", "exit 0", EVIL], 1, name=EVIL, out=str(out))
        wait_final(c, [jid], 30)
        pending = c.submit(["sleep", "30"], 1, name=EVIL, out=os.devnull)
        views = {
            "queue": cli("queue", "--state", state),
            "history": cli("history", "--state", state),
            "history -o": cli("history", "--state", state, "-o", "JobID,JobName%60,State"),
            "info": cli("info", "--state", state, str(jid)),
            "info pending": cli("info", "--state", state, str(pending)),
        }
        for what, (code, text, err) in views.items():
            assert code == 0, (what, err)
            assert not RAW.search(text), (what, text)
            assert "\\x1b[2J" in text or "\\x1b" in text, (what, text)
            assert "forged line" not in text.splitlines()[-1] or "\\n" in text, what
            assert not any(line.startswith("forged line") for line in text.splitlines()), (what, text)
        assert "\\u202e" in views["info"][1] and "\\r" in views["info"][1]
        n_rows = {"queue": 1, "history": 2}
        for what, n in n_rows.items():
            assert len(views[what][1].splitlines()) == n + 1, views[what][1]      # one line per job, as Slurm
        for argv in (("queue", "--json"), ("history", "--json")):
            code, text, _ = cli(*argv, "--state", state)
            assert code == 0
            names = {j["name"] for j in json.loads(text)["jobs"]}
            assert names == {EVIL}                                       # exact, unescaped
        code, text, _ = cli("info", "--state", state, "--json", str(jid))
        doc = json.loads(text)
        assert doc["job"]["cmd"][-1] == EVIL and doc["job"]["out"] == str(out)


def test_secret_looking_variables_never_reach_the_job_or_the_state(env):
    secrets = {"DB_PASSWD": "hunter2a", "GH_PAT": "ghp_abcdef123456", "PGPASS": "pgsecret9",
               "DATABASE_URL": "postgres://u:s3cretpw@h/db", "SMTP_PW": "smtpsecret7"}
    plain = {"PATH": os.environ["PATH"], "PWD": str(env), "DATABASE_HOST": "postgres://h/db", "PATCH_LEVEL": "3"}
    for k, v in secrets.items():
        assert secret_looking(k, v), k
    for k, v in plain.items():
        assert not secret_looking(k, v), k
    state = env / "ctl.sqlite"
    with daemon_thread(state, HostPool.local(1)) as (d, c):
        out = env / "env.out"
        jid = c.submit(["sh", "-c", "env"], 1, out=str(out), env={**secrets, **plain})
        assert wait_final(c, [jid], 30)[jid] == "COMPLETED"
        seen = dict(line.split("=", 1) for line in out.read_text().splitlines() if "=" in line)
        assert not set(secrets) & set(seen)
        assert seen["DATABASE_HOST"] == "postgres://h/db" and seen["PATCH_LEVEL"] == "3"
        d.store.db.execute("PRAGMA wal_checkpoint(FULL)")
    stored = b"".join(p.read_bytes() for p in Path(env).glob("ctl.sqlite*") if p.is_file())
    for v in secrets.values():
        assert v.encode() not in stored, v
