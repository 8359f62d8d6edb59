"""The controller's state on disk: one SQLite file in WAL mode (hosts, jobs, size steps, events).

Every change is committed before the daemon acts on it (starts a process, sends an order), so ``kill -9`` of
the daemon loses nothing: a restart reloads the hosts, the queue in its order, the running jobs (which are
re-attached) and the orders in flight. Only the daemon writes; other processes may read
(:meth:`Store.reader`: ``malleable history`` while the daemon is down).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from malleable.errors import ConfigError

from ._events import AddEvent, AddStep, DeleteHost, SaveHost, SaveJob
from ._fsrecord import FsPhase
from ._protocol import History
from ._records import HostRec, JobRec

__all__ = ["Store", "history_match"]

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS hosts (
    name TEXT PRIMARY KEY, idx INTEGER NOT NULL, owner INTEGER, drain INTEGER, drain_since REAL);
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY, rec TEXT NOT NULL, state TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
CREATE TABLE IF NOT EXISTS steps (
    job_id INTEGER NOT NULL, n INTEGER NOT NULL, t REAL NOT NULL, kind TEXT NOT NULL, size INTEGER NOT NULL,
    hosts TEXT NOT NULL, decided REAL, seconds REAL, PRIMARY KEY (job_id, n));
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, t REAL NOT NULL, job_id INTEGER, kind TEXT NOT NULL, text TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_job ON events(job_id);
CREATE TABLE IF NOT EXISTS users (name TEXT PRIMARY KEY, nonce TEXT NOT NULL, created REAL NOT NULL);
"""

ACTIVE = ("PENDING", "STARTING", "RUNNING")
"""Job states that hold a place in the queue or on hosts (the others are final)."""
_ENDING = (FsPhase.STAGING_OUT.value, FsPhase.STOPPING.value, FsPhase.ABANDONED.value)
"""File-system phases of an ended job that the controller still has to finish (read back at a restart)."""


def history_match(q: History, job: dict[str, Any]) -> bool:
    """Does a job (a :meth:`JobRec.public` row) pass the filters of ``q`` (limit aside)?"""
    if q.jobs and job["id"] not in q.jobs:
        return False
    if q.users and job.get("user", "") not in q.users:
        return False
    if q.states and job["state"] not in q.states:
        return False
    if q.until and job["submit"] > q.until:
        return False
    return not (q.since and job["end"] and job["end"] < q.since)


def private_file(path: str) -> None:
    """Make ``path`` (created empty if missing) and SQLite's ``-wal``/``-shm`` files beside it readable by their
    owner only (0600): the state holds every job's command, environment and the users' list."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.close(fd)
    for p in (path, path + "-wal", path + "-shm"):
        try:
            if os.stat(p).st_mode & 0o077:
                os.chmod(p, 0o600)
        except FileNotFoundError:
            pass


class Store:
    """SQLite persistence (WAL, synchronous=NORMAL: a committed transaction survives a process crash).

    Args:
        path: the database file (``":memory:"`` for tests of the core).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        if path != ":memory:":
            private_file(path)
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10.0)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(_SCHEMA)
        cols = {r[1] for r in self.db.execute("PRAGMA table_info(hosts)")}
        if "down" not in cols:                      # state files of earlier versions
            self.db.execute("ALTER TABLE hosts ADD COLUMN down TEXT NOT NULL DEFAULT ''")
        self._depth = 0
        if self.get_meta("schema") is None:
            self.set_meta("schema", str(SCHEMA_VERSION))

    @classmethod
    def reader(cls, path: str) -> Store:
        """The state file opened read-only (it is never created or changed; the daemon may run meanwhile).

        Raises:
            ConfigError: no such file, not a controller state file, or one written by a newer version.
        """
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"no controller state file {path}" + (" (it is a directory)" if p.is_dir() else ""))
        if not os.access(p, os.R_OK):
            raise ConfigError(f"cannot read the state file {path} (it is private to the operator: ask the daemon "
                              "with --controller ADDR)")
        self = cls.__new__(cls)
        self.path, self._depth = path, 0
        self.db = sqlite3.connect(p.absolute().as_uri() + "?mode=ro", uri=True, check_same_thread=False,
                                  timeout=10.0)
        try:
            names = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            version = self.get_meta("schema") if "meta" in names else None
        except sqlite3.DatabaseError as e:
            self.db.close()
            raise ConfigError(f"{path} is not a controller state file ({e})") from None
        if not {"meta", "jobs", "steps", "events"} <= names or version is None:
            self.db.close()
            raise ConfigError(f"{path} is not a controller state file (no controller tables)")
        if not version.isdigit() or int(version) > SCHEMA_VERSION:
            self.db.close()
            raise ConfigError(f"{path} was written by a newer malleable (state schema {version}, this one reads "
                              f"up to {SCHEMA_VERSION})")
        return self

    def close(self) -> None:
        """Close the database."""
        self.db.close()

    @contextmanager
    def tx(self) -> Iterator[None]:
        """One transaction (nested uses join the outer one); committed on exit, rolled back on error."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self.db.execute("BEGIN IMMEDIATE")
        self._depth = 1
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        else:
            self.db.execute("COMMIT")
        finally:
            self._depth = 0

    # -- meta ------------------------------------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        """A stored setting, or None."""
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else row[0]

    def set_meta(self, key: str, value: str) -> None:
        """Store a setting."""
        self.db.execute("INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                        (key, value))

    # -- hosts -----------------------------------------------------------------------------------------------
    def load_hosts(self) -> list[HostRec]:
        """All hosts in pool order."""
        down = "down" if "down" in {r[1] for r in self.db.execute("PRAGMA table_info(hosts)")} else "''"
        rows = self.db.execute(f"SELECT name, idx, owner, drain, drain_since, {down} FROM hosts "  # noqa: S608
                               "ORDER BY idx").fetchall()
        return [HostRec(n, i, o, d, ds or 0.0, dn or "") for n, i, o, d, ds, dn in rows]

    def save_host(self, h: HostRec | SaveHost) -> None:
        """Insert or update one host."""
        self.db.execute(
            "INSERT INTO hosts(name, idx, owner, drain, drain_since, down) VALUES(?,?,?,?,?,?) ON CONFLICT(name) "
            "DO UPDATE SET idx=excluded.idx, owner=excluded.owner, drain=excluded.drain, "
            "drain_since=excluded.drain_since, down=excluded.down",
            (h.name, h.idx, h.owner, h.drain, h.drain_since, h.down))

    def delete_host(self, name: str) -> None:
        """Forget a host (it left the pool between two starts)."""
        self.db.execute("DELETE FROM hosts WHERE name=?", (name,))

    # -- jobs ------------------------------------------------------------------------------------------------
    def next_job_id(self) -> int:
        """One more than the largest job id ever used."""
        row = self.db.execute("SELECT MAX(id) FROM jobs").fetchone()
        return (row[0] or 0) + 1

    def save_job(self, j: JobRec) -> None:
        """Insert or update one job."""
        self._save_job_text(j.id, str(j.state), j.to_json())

    def _save_job_text(self, job_id: int, state: str, text: str) -> None:
        self.db.execute("INSERT INTO jobs(id, rec, state) VALUES(?,?,?) ON CONFLICT(id) DO UPDATE "
                        "SET rec=excluded.rec, state=excluded.state", (job_id, text, state))

    def ended_jobs(self) -> dict[int, str]:
        """Ids and final states of the jobs that ended."""
        q = f"SELECT id, state FROM jobs WHERE state NOT IN ({','.join('?' * len(ACTIVE))})"  # noqa: S608
        return dict(self.db.execute(q, ACTIVE).fetchall())

    def apply(self, actions: Sequence[Any]) -> None:
        """Carry out the core's persistence actions (:data:`~._events.PERSIST`), in order, in one transaction;
        other actions are ignored."""
        with self.tx():
            for a in actions:
                t = type(a)
                if t is SaveJob:
                    self._save_job_text(a.job_id, a.state, a.text)
                elif t is SaveHost:
                    self.save_host(a)
                elif t is AddEvent:
                    self.add_event(a.job_id, a.kind, a.text, a.t)
                elif t is AddStep:
                    self.add_step(a.job_id, a.t, a.kind, list(a.hosts), a.decided, a.seconds)
                elif t is DeleteHost:
                    self.delete_host(a.name)

    def load_jobs(self, active_only: bool = True) -> list[JobRec]:
        """Jobs by id (submission order); only those not finished unless ``active_only`` is False (finished jobs
        whose file system was still being staged out or stopped are read too: the controller stops it again)."""
        if active_only:
            q = (f"SELECT rec FROM jobs WHERE state IN ({','.join('?' * len(ACTIVE))}) OR "  # noqa: S608
                 "json_extract(rec, '$.fs.phase') IN (?, ?, ?) OR json_extract(rec, '$.fs.old') IS NOT NULL "
                 "ORDER BY id")
            rows = self.db.execute(q, (*ACTIVE, *_ENDING)).fetchall()
        else:
            rows = self.db.execute("SELECT rec FROM jobs ORDER BY id").fetchall()
        return [JobRec.from_json(r[0]) for r in rows]

    def load_job(self, job_id: int) -> JobRec | None:
        """One job, or None."""
        row = self.db.execute("SELECT rec FROM jobs WHERE id=?", (job_id,)).fetchone()
        return None if row is None else JobRec.from_json(row[0])

    def history(self, q: History) -> list[JobRec]:
        """Jobs selected as sacct selects them (:class:`~._protocol.History`), newest first."""
        where, args = [], []
        for col, vals in (("id", q.jobs), ("state", q.states)):
            if vals:
                where.append(f"{col} IN ({','.join('?' * len(vals))})")
                args += list(vals)
        sql = "SELECT rec FROM jobs" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id DESC"  # noqa: S608 - placeholders only
        out: list[JobRec] = []
        for (rec,) in self.db.execute(sql, args):
            j = JobRec.from_json(rec)
            if history_match(q, j.public()):
                out.append(j)
                if q.limit and len(out) >= q.limit:
                    break
        return out

    def finished_jobs(self, limit: int = 0) -> list[JobRec]:
        """Jobs of every state, newest first (``limit`` 0: all)."""
        q = "SELECT rec FROM jobs ORDER BY id DESC" + (" LIMIT ?" if limit else "")  # noqa: S608 - constant text
        rows = self.db.execute(q, (limit,) if limit else ()).fetchall()
        return [JobRec.from_json(r[0]) for r in rows]

    # -- users ---------------------------------------------------------------------------------------------
    def load_users(self) -> dict[str, tuple[str, float]]:
        """User name -> (nonce of their key, when added)."""
        return {n: (k, t) for n, k, t in self.db.execute("SELECT name, nonce, created FROM users ORDER BY name")}

    def save_user(self, name: str, nonce: str, created: float) -> None:
        """Add a user, or give them a new key."""
        self.db.execute("INSERT INTO users(name, nonce, created) VALUES(?,?,?) ON CONFLICT(name) DO UPDATE SET "
                        "nonce=excluded.nonce, created=excluded.created", (name, nonce, created))

    def delete_user(self, name: str) -> bool:
        """Remove a user; whether there was one."""
        return self.db.execute("DELETE FROM users WHERE name=?", (name,)).rowcount > 0

    # -- steps and events ------------------------------------------------------------------------------------
    def add_step(self, job_id: int, t: float, kind: str, hosts: list[str], decided: float | None = None,
                 seconds: float | None = None) -> None:
        """Record that the job runs on ``hosts`` from ``t`` on (after a start or a resize)."""
        n = self.db.execute("SELECT COUNT(*) FROM steps WHERE job_id=?", (job_id,)).fetchone()[0]
        self.db.execute("INSERT INTO steps(job_id, n, t, kind, size, hosts, decided, seconds) VALUES(?,?,?,?,?,?,?,?)",
                        (job_id, n, t, kind, len(hosts), json.dumps(hosts), decided, seconds))

    def steps(self, job_id: int) -> list[dict[str, Any]]:
        """The job's size history, oldest first."""
        rows = self.db.execute("SELECT n, t, kind, size, hosts, decided, seconds FROM steps WHERE job_id=? "
                               "ORDER BY n", (job_id,)).fetchall()
        return [{"n": n, "t": t, "kind": k, "size": s, "hosts": json.loads(h), "decided": d, "seconds": sec}
                for n, t, k, s, h, d, sec in rows]

    def add_event(self, job_id: int | None, kind: str, text: str, t: float | None = None) -> None:
        """Append to the event log."""
        self.db.execute("INSERT INTO events(t, job_id, kind, text) VALUES(?,?,?,?)",
                        (time.time() if t is None else t, job_id, kind, text))

    def events(self, job_id: int | None = None, limit: int = 200) -> list[dict[str, Any]]:
        """The last ``limit`` events (of one job, or all), oldest first."""
        if job_id is None:
            rows = self.db.execute("SELECT t, job_id, kind, text FROM events ORDER BY id DESC LIMIT ?",
                                   (limit,)).fetchall()
        else:
            rows = self.db.execute("SELECT t, job_id, kind, text FROM events WHERE job_id=? ORDER BY id DESC "
                                   "LIMIT ?", (job_id, limit)).fetchall()
        return [{"t": t, "job_id": j, "kind": k, "text": x} for t, j, k, x in reversed(rows)]
