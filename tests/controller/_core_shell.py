"""A minimal shell around the live core for tests: events in, persistence carried out on a real SQLite store,
the other actions returned (what the daemon would do with them)."""

from __future__ import annotations

from typing import Any

from malleable.controller.daemon import _protocol as P
from malleable.controller.daemon._core import Core, CoreConfig
from malleable.controller.daemon._events import (
    PERSIST,
    HostClean,
    JobExited,
    JobLaunched,
    Reply,
    Request,
    Schedule,
    Tick,
)
from malleable.controller.daemon._store import Store


class Shell:
    """The core with its store; methods named after the old core API, each one event."""

    def __init__(self, path: str, hosts: tuple[str, ...], policy: Any, **cfg: Any) -> None:
        self.store = Store(path)
        self.core = Core(hosts, policy, CoreConfig(**cfg), hosts=self.store.load_hosts(),
                         jobs=self.store.load_jobs(), ended=self.store.ended_jobs())
        first = self.core.take_actions()
        self.store.apply(first)
        self.first = [a for a in first if type(a) not in PERSIST]   # process actions of the restart (AttachFs)

    # state, as the old tests read it
    @property
    def jobs(self):
        return self.core.jobs

    @property
    def hosts(self):
        return self.core.hosts

    @property
    def policy(self):
        return self.core.policy

    @policy.setter
    def policy(self, p: Any) -> None:
        self.core.policy = p

    def draining(self):
        return self.core.draining()

    def queue(self):
        return self.core.queue()

    def snapshot(self, now: float):
        return self.core.snapshot(now)

    # events
    def do(self, event: Any) -> list[Any]:
        """Hand ``event`` to the core, persist, return the process actions and the reply (in order)."""
        actions = self.core.handle(event)
        self.store.apply([a for a in actions if type(a) in PERSIST])
        return [a for a in actions if type(a) not in PERSIST]

    def request(self, msg: Any, now: float) -> tuple[Any, list[Any]]:
        out = self.do(Request(now, msg))
        replies = [a.msg for a in out if type(a) is Reply]
        assert len(replies) == 1, out
        return replies[0], [a for a in out if type(a) is not Reply]

    def submit(self, m: P.Submit, now: float) -> int:
        return self.request(m, now)[0].job_id

    def cancel(self, job_id: int, now: float) -> list[Any]:
        return self.request(P.Cancel(job_id), now)[1]

    def schedule(self, now: float) -> list[Any]:
        return self.do(Schedule(now))

    def tick(self, now: float) -> list[Any]:
        return self.do(Tick(now))

    def launched(self, job_id: int, pid: int, ctime: float, now: float) -> None:
        assert self.do(JobLaunched(now, job_id, pid, ctime)) == []

    def exited(self, job_id: int, code: int | None, now: float, reason: str = "") -> list[Any]:
        return self.do(JobExited(now, job_id, code, reason))

    def host_clean(self, name: str, now: float) -> list[Any]:
        return self.do(HostClean(now, name))

    def register(self, m: P.Register, now: float) -> None:
        self.request(m, now)

    def poll(self, m: P.Poll, now: float) -> Any:
        reply = self.request(m, now)[0]
        return None if type(reply) is P.Ok else reply

    def committed(self, m: P.Committed, now: float) -> list[Any]:
        return self.request(m, now)[1]

    def refused(self, m: P.Refused, now: float) -> list[Any]:
        return self.request(m, now)[1]
