"""Application-initiated resizes (request_adapt): granted, refused and deferred under a plan (real MPI jobs on
each implementation), and the controller link's side of the protocol (a recording stand-in for the daemon)."""

from __future__ import annotations

import json

import pytest
import zmq

from malleable.controller.daemon import _protocol as P
from malleable.errors import PlanError
from malleable.runtime import _iometer
from malleable.runtime._link import ControllerSource
from malleable.runtime._plan import parse_plan
from malleable.runtime._requests import AdaptRequest, Refusal, check_request, grant
from malleable.runtime._types import Resize
from tests.runtime._helpers import run_prog


def answers(proc):
    return [json.loads(x) for x in proc.stdout.splitlines() if x.startswith('{"answer"')]


def sizes(rows):
    return [r["size"] for r in rows]


def test_request_arguments_and_plan_answer_steps():
    assert check_request(4, None, None, 2) == AdaptRequest(4, 0, 0, 2)
    assert grant(check_request(None, 2, 6, 0)) == Resize(6) and grant(check_request(None, 3, None, 0)) == Resize(3)
    for args, err in [((None, None, None), ValueError), ((0, None, None), ValueError), ((None, 5, 2), ValueError),
                      ((7, 1, 3), ValueError), ((2.5, None, None), TypeError)]:
        with pytest.raises(err):
            check_request(*args, 0)
    steps = parse_plan('[{"at_probe": 3, "answer": "defer"}, {"at_probe": 5, "answer": "grant"}]')
    assert [(s.at_probe, s.answer) for s in steps] == [(3, "defer"), (5, "grant")]
    with pytest.raises(PlanError, match="an answer step is"):
        parse_plan('[{"at_probe": 3, "answer": "maybe"}]')
    with pytest.raises(PlanError, match="an answer step is"):
        parse_plan('[{"at_probe": 3, "answer": "grant", "procs": 2}]')


def test_request_from_rank_1_granted_by_the_plan(mpi):
    plan = [{"at_probe": 6, "answer": "grant"}]
    rows, reports, errors, proc = run_prog(mpi, 2, plan, iters=8, env={"PROG_REQUEST": "1:3:4:0:0"})
    assert not errors and all(r["ok"] for r in rows)
    assert sizes(rows) == [2, 2, 2, 2, 2, 4, 4, 4]
    assert answers(proc) == [{"answer": "granted", "at": 6, "reason": "", "procs": 4}]
    assert [(r["report"]["old"], r["report"]["new"]) for r in reports] == [(2, 4)]


def test_request_refused_by_the_plan(mpi):
    plan = [{"at_probe": 5, "answer": "refuse"}, {"at_probe": 7, "answer": "grant"}]
    rows, reports, errors, proc = run_prog(mpi, 1, plan, iters=8, env={"PROG_REQUEST": "0:2:0:2:3"})
    assert sizes(rows) == [1] * 8 and reports == [] and all(r["ok"] for r in rows)
    # refused at 5; nothing is outstanding any more when the grant step comes
    assert answers(proc) == [{"answer": "refused", "at": 5, "reason": "refused by the plan", "procs": None}]


def test_request_deferred_then_granted(mpi):
    plan = [{"at_probe": 4, "answer": "defer"}, {"at_probe": 7, "answer": "grant"}]
    rows, reports, errors, proc = run_prog(mpi, 1, plan, iters=8, env={"PROG_REQUEST": "0:2:0:1:3"})
    assert sizes(rows) == [1, 1, 1, 1, 1, 1, 3, 3] and all(r["ok"] for r in rows)
    assert answers(proc) == [{"answer": "granted", "at": 7, "reason": "", "procs": 3}]


@pytest.fixture
def daemon_stand_in(monkeypatch):
    """A ROUTER socket speaking the controller protocol, standing in for the daemon: the test plays the policy.

    The link gets a process I/O meter of its own, as in a job's rank 0: I/O counted by other tests in this process
    would otherwise go out as an ``io`` progress report between the messages the test expects."""
    monkeypatch.setattr(_iometer, "_METER", _iometer.IOMeter())
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    yield sock, f"tcp://127.0.0.1:{port}"
    sock.close(0)
    ctx.term()


def _recv(sock, token):
    assert sock.poll(5000), "the link sent nothing"
    ident, *frames = sock.recv_multipart()
    if frames and frames[0] == b"":
        frames = frames[1:]
    msg, rid = P.decode(frames, token)
    return ident, msg, rid


def _reply(sock, ident, msg, rid, token):
    sock.send_multipart([ident, b"", *P.encode(msg, token, rid)])


def test_link_forwards_requests_and_returns_the_policys_answers(daemon_stand_in):
    sock, addr = daemon_stand_in
    token = b"t" * 32
    link = ControllerSource(addr, 7, token)
    try:
        link.request(AdaptRequest(0, 2, 6, 1))
        ident, msg, rid = _recv(sock, token)
        assert msg == P.ResizeRequest(7, 0, 2, 6)
        _reply(sock, ident, P.Ok(), rid, token)
        assert link.poll(1) is None  # deferred: the policy has not answered
        ident, msg, rid = _recv(sock, token)
        assert msg == P.Poll(7, 1)
        _reply(sock, ident, P.Declined("no free hosts"), rid, token)
        answer = None
        for probe in range(2, 200):  # the answer is read at a later probe (the link never blocks)
            answer = link.poll(probe) or answer
            if answer is not None:
                break
            if sock.poll(20):
                ident, msg, rid = _recv(sock, token)
                assert isinstance(msg, P.Poll)
        assert answer == Refusal("no free hosts")
        link.request(AdaptRequest(5, 0, 0, 0))
        granted = None
        for probe in range(200, 400):
            got = link.poll(probe)
            if isinstance(got, Resize):
                granted = got
                break
            if sock.poll(20):
                ident, msg, rid = _recv(sock, token)
                if isinstance(msg, P.ResizeRequest):
                    assert msg == P.ResizeRequest(7, 5, 0, 0)
                    _reply(sock, ident, P.Ok(), rid, token)
                else:
                    _reply(sock, ident, P.Order(1, 5, ["h1"]), rid, token)
        assert granted == Resize(5, ("h1",))
    finally:
        link.close()
