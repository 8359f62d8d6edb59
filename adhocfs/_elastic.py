"""Elasticity of the metadata server: commissioning (expand), decommissioning (shrink) with partial or
total redistribution, and rebalancing, run as a journaled job between client requests.

Mixed into :class:`~._meta.MetaServer`; everything runs on the metadata server's loop (one thread).

A shrink goes through these journaled states (``kv['change']`` in SQLite):

1. ``fencing``: every file whose layout touches a leaving server becomes ``decommissioning`` with a new
   version; data servers refuse writes of older versions (clients wait), reads go on. The current epoch
   drops the leaving servers, so new files and new blocks avoid them.
2. ``moving``: after an inventory of the servers, the pure planner gives new layouts and moves. Files
   with no block on a leaving server switch at once (new layout, ``ready``); the others stay blocked while
   their blocks are copied (sources are kept).
3. ``cleanup``: one transaction switches every affected file to its new layout and version (``ready``)
   and marks the leaving servers ``gone``; then fences make old layouts stale everywhere, moved sources
   are dropped and the leaving servers are told to exit.

``lose`` (a dead server declared lost) and ``repair`` (``fs check --repair``) run the same steps: copies come
from the surviving replicas, written blocks without any live copy are recorded as damaged, and a copy that
fails is skipped (reported by the next check) instead of rolling back.

A crash in ``fencing`` or ``moving`` (of the metadata server, or a source that stops answering) rolls
back: old layouts are still valid because no source block was changed or deleted; copies made so far are
dropped. A crash in ``cleanup`` finishes the cleanup on restart. No byte is lost either way (a killed
leaving server must come back, with ``--dir``, before its blocks can be read or moved again).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from malleable.adhocfs._namespace import BLOCKING
from malleable.adhocfs._placement import UNALLOCATED, FileLayout, intern_epoch, merge_ranges, ranges_of
from malleable.adhocfs._protocol import (
    Change,
    Check,
    CheckReply,
    Copy,
    Data,
    DropBlocks,
    Expand,
    Fence,
    Get,
    Inventory,
    InventoryReply,
    Lose,
    Message,
    Shrink,
    Shutdown,
    Stats,
)
from malleable.adhocfs._redistribute import FileState, Plan, plan_rebalance, plan_repair, plan_shrink
from malleable.errors import FsError, PlacementError

__all__ = ["ElasticMixin"]

log = logging.getLogger(__name__)

BATCH = 16  # blocks per move step
ANY_VERSION = 1 << 62  # the metadata server's own reads pass every fence


class _Job:
    """A running redistribution (in memory; its durable part is the journal)."""

    def __init__(self, journal: dict[str, Any]) -> None:
        self.journal = journal
        self.moves: list[list[int]] = journal["moves"]
        self.done = 0
        self.bytes = 0
        self.t0 = time.monotonic()
        self.rate = float(journal.get("rate", 0.0))


class ElasticMixin:
    """Expand/shrink/rebalance for the metadata server (needs ``ns``, ``call_many``, ``run_actions``)."""

    ns: Any

    def call_many(self, calls: Any, timeout: float = ...) -> dict[int, Any]:  # provided by MetaServer
        raise NotImplementedError

    def run_actions(self, actions: Any) -> None:  # provided by MetaServer
        raise NotImplementedError

    def init_elastic(self) -> None:
        """Set up job state."""
        self.job: _Job | None = None
        self.last_change: dict[str, Any] | None = None

    # ------------------------------------------------------------ status
    def job_active(self) -> bool:
        """Whether a redistribution job is running."""
        return self.job is not None

    def change_info(self) -> dict[str, Any] | None:
        """The change in progress, else the last one finished (None if there was none)."""
        if self.job is None:
            commissioning = self.ns.kv_get("commissioning")
            if commissioning:
                return {"kind": "expand", "state": "commissioning", "sids": commissioning}
            return self.last_change
        j = self.job.journal
        elapsed = time.monotonic() - self.job.t0
        return {
            "id": j["id"],
            "kind": j["kind"],
            "state": "running",
            "phase": j["state"],
            "mode": j.get("mode"),
            "sids": j["sids"],
            "planned": len(self.job.moves),
            "moved": self.job.done,
            "bytes_moved": self.job.bytes,
            "on_leaving": j.get("on_leaving", 0),
            "blocked_files": len(j.get("affected", {})),
            "elapsed": round(elapsed, 3),
        }

    def _finish(self, journal: dict[str, Any], state: str, **extra: Any) -> dict[str, Any]:
        info = {
            "id": journal["id"],
            "kind": journal["kind"],
            "state": state,
            "mode": journal.get("mode"),
            "sids": journal["sids"],
            "planned": len(journal.get("moves", [])),
            "on_leaving": journal.get("on_leaving", 0),
            **extra,
        }
        if self.job is not None:
            info.update(
                moved=self.job.done,
                bytes_moved=self.job.bytes,
                elapsed=round(time.monotonic() - self.job.t0, 3),
            )
        self.last_change = info
        self.job = None
        return info

    # ------------------------------------------------------------ expand
    def expand(self, msg: Expand) -> Message:
        """Commission registered servers: the current epoch becomes the old list plus ``msg.sids``."""
        ns = self.ns
        if not msg.sids:  # cancel a commissioning (allowed at any time)
            with _txn(ns):
                ns.db.execute("UPDATE files SET status='ready' WHERE status='commissioning'")
                ns.kv_set("commissioning", None)
            return Change({"kind": "expand", "state": "cancelled"})
        if self.job is not None:
            raise FsError("another change is in progress; try again when it is done")
        rows = {r["sid"]: r for r in ns.servers()}
        for sid in msg.sids:
            r = rows.get(sid)
            if r is None or r["state"] not in ("up", "active"):
                raise FsError(
                    f"data server {sid} is not registered and idle (state {r['state'] if r else 'unknown'})"
                )
        with _txn(ns):
            ns.db.execute("UPDATE files SET status='ready' WHERE status='commissioning'")
            ns.kv_set("commissioning", None)
            cur = ns.current_epoch()
            epochs = ns.epochs()
            old = epochs.get(cur, ()) if cur is not None else ()
            eid, epochs = intern_epoch(epochs, [*old, *msg.sids])
            ns.set_epochs(epochs, eid)
            for sid in msg.sids:
                ns.db.execute("UPDATE servers SET state='active' WHERE sid=?", (sid,))
            ns.history(
                {"kind": "expand", "sids": list(msg.sids), "epoch": eid, "servers": list(epochs[eid])},
                time.time(),
            )
        log.info("commissioned servers %s: epoch %d = %s", msg.sids, eid, epochs[eid])
        info = {"kind": "expand", "state": "done", "epoch": eid, "servers": list(epochs[eid])}
        if msg.rebalance and cur is not None:
            info = self._start(kind="rebalance", sids=list(msg.sids), mode="total", rate=msg.rate)
        return Change(info)

    # ------------------------------------------------------------ shrink
    def shrink(self, msg: Shrink) -> Message:
        """Start decommissioning ``msg.sids`` (the job then runs between requests)."""
        if msg.mode not in ("partial", "total"):
            raise ValueError(f"mode must be 'partial' or 'total', got {msg.mode!r}")
        if self.job is not None:
            raise FsError("another change is in progress; try again when it is done")
        cur = self.ns.current_epoch()
        active = set(self.ns.epochs().get(cur, ())) if cur is not None else set()
        bad = sorted(set(msg.sids) - active)
        if not msg.sids or bad:
            raise PlacementError(f"servers {bad or '[]'} are not active data servers")
        if not active - set(msg.sids):
            raise PlacementError("cannot remove every data server")
        return Change(self._start(kind="shrink", sids=sorted(set(msg.sids)), mode=msg.mode, rate=msg.rate))

    def lose(self, msg: Lose) -> Message:
        """Declare dead servers lost and start re-copying their blocks from the other replicas."""
        if self.job is not None:
            raise FsError("another change is in progress; try again when it is done")
        rows = {r["sid"]: r for r in self.ns.servers()}
        bad = [s for s in msg.sids if rows.get(s, {}).get("state") not in ("active", "leaving", "up")]
        if not msg.sids or bad:
            raise PlacementError(f"servers {bad or '[]'} are not data servers in use (already lost or gone?)")
        alive = self.call_many([(s, Stats()) for s in msg.sids], timeout=1.0)
        answering = [msg.sids[i] for i, rep in alive.items() if not isinstance(rep, BaseException)]
        if answering:
            raise FsError(
                f"data servers {answering} are answering: stop them first, or use 'malleable fs shrink' to move "
                "their blocks away"
            )
        uncommissioned = [s for s in msg.sids if rows[s]["state"] == "up"]
        with _txn(self.ns):
            for s in uncommissioned:  # held no data yet: simply gone
                self.ns.db.execute("UPDATE servers SET state='lost' WHERE sid=?", (s,))
        sids = sorted(set(msg.sids) - set(uncommissioned))
        if not sids:
            return Change({"kind": "lose", "state": "done", "sids": uncommissioned})
        cur = self.ns.current_epoch()
        if not set(self.ns.epochs().get(cur, ())) - set(sids):
            raise PlacementError("cannot lose every data server")
        return Change(self._start(kind="lose", sids=sids, mode="partial", rate=0.0))

    def check(self, msg: Check) -> Message:
        """Compare the live servers' blocks with the files' replica sets; with ``repair`` start re-copying."""
        if self.job is not None:
            raise FsError("a change is in progress; check again when it is done")
        files = self._file_states([r for r in self.ns.files()])
        plan = plan_repair(files, self.ns.epochs(), self.ns.current_epoch() or 0, self._inventory(), self.ns.replicas())
        out = []
        for row in self.ns.files():
            fp = plan.files.get(row["fid"])
            damaged = json.loads(row["damaged"])
            if not (fp or damaged):
                continue
            bs = row["block_size"]
            out.append({
                "path": row["path"],
                "fid": row["fid"],
                "damaged": _byte_ranges(damaged, bs, row["size"]),
                "missing": _byte_ranges(ranges_of(fp.damaged) if fp else [], bs, row["size"]),
                "under_replicated": len({m.block for m in fp.moves}) if fp else 0,
            })
        change = None
        if msg.repair and plan.files:
            change = self._start(kind="repair", sids=[], mode="partial", rate=0.0)
        return CheckReply(out, len(files), change)

    def _file_states(self, rows: list[dict[str, Any]]) -> list[FileState]:
        return [
            FileState(
                r["fid"],
                self.ns.layout(r),
                r["hw"],
                tuple(tuple(x) for x in json.loads(r["written"])),
                tuple(tuple(x) for x in json.loads(r["damaged"])),
            )
            for r in rows
        ]

    def _start(self, kind: str, sids: list[int], mode: str, rate: float) -> dict[str, Any]:
        ns = self.ns
        gone = set(sids) if kind in ("shrink", "lose") else set()
        cur = ns.current_epoch()
        epochs = ns.epochs()
        journal: dict[str, Any] = {
            "id": int(ns.kv_get("change_seq", 0)) + 1,
            "kind": kind,
            "mode": mode,
            "sids": sids,
            "state": "fencing",
            "prev_epoch": cur,
            "rate": rate,
            "t0": time.time(),
            "moves": [],
            "affected": {},
        }
        status = {"shrink": "decommissioning", "rebalance": "rebalancing"}.get(kind, "repairing")
        with _txn(ns):
            ns.kv_set("change_seq", journal["id"])
            candidates = {}
            for row in ns.files():
                lay = ns.layout(row)
                if kind == "repair":
                    touches = row["written"] != "[]"
                elif gone:
                    touches = bool(lay.servers(epochs) & gone)
                else:
                    touches = any(iv.epoch not in (cur, UNALLOCATED) for iv in lay.intervals)
                if touches and row["status"] not in BLOCKING:
                    candidates[row["fid"]] = row["version"] + 1
                    self._set_file(row["fid"], status=status, version=row["version"] + 1)
                    self._fence(row["fid"], row["version"] + 2, None)
            journal["candidates"] = {str(k): v for k, v in candidates.items()}
            if gone:
                remaining = [s for s in epochs[cur] if s not in gone]
                new_cur, epochs = intern_epoch(epochs, remaining)
                ns.set_epochs(epochs, new_cur)
                for sid in gone:
                    state = "lost" if kind == "lose" else "leaving"
                    ns.db.execute("UPDATE servers SET state=? WHERE sid=?", (state, sid))
            ns.kv_set("change", journal)
        log.info("%s %s (%s): %d files fenced", kind, sids, mode, len(candidates))
        self.job = _Job(journal)
        try:
            self._send_fences(list(candidates), strict=True)
            inventory = self._inventory()
            plan = self._plan(kind, gone, cur, epochs, mode, inventory)
            self._apply_plan(journal, plan, candidates)
        except (FsError, PlacementError, OSError) as e:
            log.warning("%s of %s failed before moving: %s; rolling back", kind, sids, e)
            return self._rollback(journal, str(e))
        return self.change_info() or {}

    def _plan(
        self,
        kind: str,
        gone: set[int],
        prev: int,
        epochs: dict[int, tuple[int, ...]],
        mode: str,
        inventory: dict[int, dict[int, list[int]]],
    ) -> Plan:
        old_epochs = self.ns.epochs()
        files = self._file_states([r for r in self.ns.files() if r["status"] in BLOCKING])
        r = self.ns.replicas()
        if kind in ("shrink", "lose"):
            return plan_shrink(files, old_epochs, prev, gone, inventory, mode, r)
        if kind == "repair":
            return plan_repair(files, old_epochs, self.ns.current_epoch(), inventory, r)
        return plan_rebalance(files, old_epochs, self.ns.current_epoch(), inventory, r)

    def _apply_plan(self, journal: dict[str, Any], plan: Plan, candidates: dict[int, int]) -> None:
        ns = self.ns
        switched = []
        drops: dict[tuple[int, int], list[int]] = {}
        for fp in plan.files.values():
            for sid, b in fp.drops:
                drops.setdefault((sid, fp.fid), []).append(b)
        with _txn(ns):
            ns.set_epochs(plan.epochs)
            for fid, blocks in plan.damaged.items():
                row = ns.file_row(fid)
                lost = merge_ranges(json.loads(row["damaged"]), ranges_of(blocks))
                ns.db.execute("UPDATE files SET damaged=? WHERE fid=?", (json.dumps(lost), fid))
                log.error("%s: %d blocks lost (no live copy): %s", row["path"], len(blocks), ranges_of(blocks)[:10])
            journal["drops"] = [[sid, fid, bl] for (sid, fid), bl in drops.items()]
            for fid, v1 in candidates.items():
                fp = plan.files.get(fid)
                if fp is None or not fp.affected:  # nothing of it moves: switch now, do not block it
                    layout = fp.layout if fp else ns.layout(ns.file_row(fid))
                    self._set_file(fid, status="ready", version=v1 + 1, layout=layout)
                    self._fence(fid, v1 + 1, v1 + 1)
                    switched.append(fid)
                else:
                    journal["affected"][str(fid)] = {"layout": fp.layout.to_pairs(), "version": v1 + 1}
                    journal["moves"] += [[m.fid, m.block, m.src, m.dst] for m in fp.moves]
            journal["on_leaving"] = plan.on_leaving
            journal["state"] = "moving"
            ns.kv_set("change", journal)
        self._send_fences(switched, strict=False)
        log.info(
            "%s plan: %d files blocked, %d switched, %d blocks to move (%d were on leaving servers)",
            journal["kind"],
            len(journal["affected"]),
            len(switched),
            len(journal["moves"]),
            plan.on_leaving,
        )

    def step_job(self) -> None:
        """Move the next batch of blocks; commit when all are moved; roll back if a server fails."""
        job = self.job
        if job is None:
            return
        if job.rate > 0 and job.bytes > job.rate * 1e6 * (time.monotonic() - job.t0):
            time.sleep(0.005)
            return
        batch = job.moves[job.done : job.done + BATCH]
        if batch:
            try:
                job.bytes += self._move(batch)
            except (FsError, OSError) as e:
                if job.journal["kind"] in ("lose", "repair"):  # nothing to roll back to: go on, check reports it
                    log.warning("%s: copying blocks failed (they stay under-replicated): %s", job.journal["kind"], e)
                    job.done += len(batch)
                    return
                log.warning("%s: moving blocks failed: %s; rolling back", job.journal["kind"], e)
                self._rollback(job.journal, str(e))
                return
            job.done += len(batch)
            return
        self._commit(job.journal)

    def _move(self, batch: list[list[int]]) -> int:
        bs = {}
        for fid, _, _, _ in batch:
            if fid not in bs:
                bs[fid] = self.ns.file_row(fid)["block_size"]
        gets = self.call_many([(src, Get(fid, b, 0, bs[fid], ANY_VERSION)) for fid, b, src, _ in batch])
        copies, nbytes = [], 0
        for i, (fid, b, src, dst) in enumerate(batch):
            rep = gets.get(i)
            if not isinstance(rep, Data):
                raise FsError(f"reading block {b} of file {fid} from data server {src}: {rep}")
            if rep.found:
                copies.append((dst, Copy(fid, b, rep.data)))
                nbytes += len(rep.data)
        for i, rep in self.call_many(copies).items():
            if isinstance(rep, BaseException) or rep.TYPE != "ok":
                raise FsError(f"copying block to data server {copies[i][0]}: {rep}")
        return nbytes

    def _commit(self, journal: dict[str, Any]) -> None:
        ns = self.ns
        gone = set(journal["sids"]) if journal["kind"] == "shrink" else set()
        with _txn(ns):
            for fid_s, a in journal["affected"].items():
                fid = int(fid_s)
                self._set_file(
                    fid, status="ready", version=a["version"], layout=FileLayout.from_pairs(a["layout"])
                )
                self._fence(fid, a["version"], a["version"])
            for sid in gone:
                ns.db.execute("UPDATE servers SET state='gone' WHERE sid=?", (sid,))
            journal["state"] = "cleanup"
            ns.kv_set("change", journal)
            ns.history(
                {
                    "kind": journal["kind"],
                    "sids": journal["sids"],
                    "mode": journal.get("mode"),
                    "moved": len(journal["moves"]),
                    "on_leaving": journal.get("on_leaving", 0),
                },
                time.time(),
            )
        self._cleanup(journal)

    def _cleanup(self, journal: dict[str, Any]) -> None:
        ns = self.ns
        self._send_fences([int(f) for f in journal["affected"]], strict=False)
        self.run_actions([(s, DropBlocks(f, bl)) for s, f, bl in journal.get("drops", [])])
        if journal["kind"] == "shrink":  # the leaving servers delete their blocks (and --dir files) and exit
            self.run_actions([(s, Shutdown(wipe=True)) for s in journal["sids"]])
        with _txn(ns):
            ns.kv_set("change", None)
        info = self._finish(journal, "done")
        log.info("%s of %s done: %s", journal["kind"], journal["sids"], info)

    def _rollback(self, journal: dict[str, Any], why: str) -> dict[str, Any]:
        ns = self.ns
        done = self.job.done if self.job is not None else len(journal.get("moves", []))
        with _txn(ns):
            rolled = []
            for fid_s in journal.get("candidates", {}):
                try:
                    row = ns.file_row(int(fid_s))
                except FileNotFoundError:
                    continue
                if row["status"] in BLOCKING:
                    self._set_file(row["fid"], status="ready", version=row["version"] + 1)
                    self._fence(row["fid"], row["version"] + 1, row["version"] + 1)
                    rolled.append(row["fid"])
            if journal["kind"] in ("shrink", "lose"):
                for sid in journal["sids"]:
                    ns.db.execute(
                        "UPDATE servers SET state='active' WHERE sid=? AND state IN ('leaving', 'lost')", (sid,)
                    )
                if journal.get("prev_epoch") is not None:
                    ns.kv_set("epoch", journal["prev_epoch"])
            ns.kv_set("change", None)
            ns.history(
                {"kind": journal["kind"], "sids": journal["sids"], "state": "rolled_back", "why": why},
                time.time(),
            )
        self._send_fences(rolled, strict=False)
        copies: dict[tuple[int, int], list[int]] = {}
        for fid, b, _, dst in journal.get("moves", [])[: max(done, 0) + BATCH]:
            copies.setdefault((dst, fid), []).append(b)
        self.run_actions([(d, DropBlocks(f, bl)) for (d, f), bl in copies.items()])
        return self._finish(journal, "rolled_back", error=why)

    def recover(self) -> None:
        """Finish or roll back a change interrupted by a crash (called at start-up)."""
        journal = self.ns.kv_get("change")
        if not journal:
            return
        if journal["state"] == "cleanup":
            log.warning("finishing the cleanup of interrupted %s %s", journal["kind"], journal["sids"])
            self._cleanup(journal)
        else:
            log.warning(
                "rolling back interrupted %s %s (state %s)",
                journal["kind"],
                journal["sids"],
                journal["state"],
            )
            self._rollback(journal, "metadata server restarted during the change")

    # ------------------------------------------------------------ helpers
    def _set_file(self, fid: int, status: str, version: int, layout: FileLayout | None = None) -> None:
        if layout is None:
            self.ns.db.execute("UPDATE files SET status=?, version=? WHERE fid=?", (status, version, fid))
        else:
            self.ns.db.execute(
                "UPDATE files SET status=?, version=?, layout=? WHERE fid=?",
                (status, version, json.dumps(layout.to_pairs()), fid),
            )

    def _fence(self, fid: int, wmin: int, rmin: int | None) -> None:
        row = self.ns._row("SELECT rmin FROM fences WHERE fid=?", (fid,))
        r = rmin if rmin is not None else (row["rmin"] if row else 0)
        self.ns.db.execute("INSERT OR REPLACE INTO fences(fid, wmin, rmin) VALUES(?, ?, ?)", (fid, wmin, r))

    def _live_sids(self) -> list[int]:
        return [
            r["sid"] for r in self.ns.servers() if r["state"] in ("active", "leaving", "up") and r["addr"]
        ]

    def _send_fences(self, fids: list[int], strict: bool) -> None:
        if not fids:
            return
        rows = {r["fid"]: r for r in self.ns._rows("SELECT * FROM fences")}
        calls = [
            (s, Fence(f, rows[f]["wmin"], rows[f]["rmin"]))
            for s in self._live_sids()
            for f in fids
            if f in rows
        ]
        for i, rep in self.call_many(calls).items():
            if isinstance(rep, BaseException) or rep.TYPE != "ok":
                if strict:
                    raise FsError(f"data server {calls[i][0]} did not accept a fence: {rep}")
                log.warning(
                    "fence on data server %d failed (applied when it registers again): %s", calls[i][0], rep
                )

    def _inventory(self) -> dict[int, dict[int, list[int]]]:
        sids = self._live_sids()
        out: dict[int, dict[int, list[int]]] = {}
        for i, rep in self.call_many([(s, Inventory()) for s in sids]).items():
            if not isinstance(rep, InventoryReply):
                raise FsError(f"data server {sids[i]} did not report its blocks: {rep}")
            out[sids[i]] = {int(f): [int(b) for b in bl] for f, bl in rep.files.items()}
        return out


def _byte_ranges(blocks: list[list[int]], bs: int, size: int) -> list[list[int]]:
    """Block ranges as inclusive byte ranges ``[first, last]`` within the file size."""
    return [[a * bs, min(b * bs, max(size, a * bs + 1)) - 1] for a, b in blocks]


class _txn:
    """``with _txn(ns):`` runs the block in one SQLite transaction."""

    def __init__(self, ns: Any) -> None:
        self.ns = ns

    def __enter__(self) -> None:
        self.ns.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: Any, *rest: object) -> None:
        self.ns.db.execute("ROLLBACK" if exc_type else "COMMIT")
