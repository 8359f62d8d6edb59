"""The metadata server's state: namespace, files (size, block size, interval-map layout, status,
version), data servers, placement epochs and fences, kept in SQLite.

:meth:`Namespace.handle` takes one validated request and returns ``(reply, actions)``; an action is a
message for a data server (``(sid, message)``) that the socket shell sends. This class never touches a
socket or a clock, so it is tested directly.

File states: ``ready``; ``commissioning`` while servers join (I/O goes on); ``decommissioning`` while a
shrink moves its blocks and ``rebalancing`` while a rebalance does (writes wait, reads go on).
Server states: ``reserved`` (id given, not yet started), ``up`` (registered, not in the current epoch),
``active`` (in the current epoch), ``leaving`` (being decommissioned), ``gone``.
"""

from __future__ import annotations

import errno
import json
import posixpath
import sqlite3
import time
from collections.abc import Callable, Iterable
from typing import Any

from malleable.adhocfs._placement import UNALLOCATED, Epochs, FileLayout, clip_ranges, merge_ranges
from malleable.adhocfs._protocol import (
    AddServers,
    Created,
    CreateFiles,
    DeclareRio,
    DropBlocks,
    DropFile,
    Entries,
    Extend,
    FileInfo,
    GetLayout,
    ListDir,
    Message,
    Mkdir,
    Names,
    Ok,
    Open,
    Opened,
    OpenFiles,
    Publish,
    Register,
    Registered,
    Remove,
    Rename,
    ScanDir,
    ServerIds,
    SetSize,
    Stat,
    StatReply,
)
from malleable.adhocfs._rpc import Busy
from malleable.errors import FsError, ProtocolError

__all__ = ["BLOCKING", "DEFAULT_BLOCK_SIZE", "MODES", "Namespace", "normalize"]

DEFAULT_BLOCK_SIZE = 512 * 1024
MODES = frozenset({"r", "r+", "w", "w+", "a", "a+", "x", "x+"})
BLOCKING = frozenset({"decommissioning", "rebalancing", "repairing"})
"""File states in which writes wait (reads go on)."""
Send = tuple[int, Message]
MAX_RANGES = 20_000  # written ranges a file may record (they travel in every FileInfo)
MAX_SIZE = 1 << 60  # largest file size a request may set

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv(k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS servers(sid INTEGER PRIMARY KEY AUTOINCREMENT, host TEXT NOT NULL,
    addr TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL, pid INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS epochs(eid INTEGER PRIMARY KEY, sids TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files(fid INTEGER PRIMARY KEY AUTOINCREMENT, path TEXT UNIQUE NOT NULL,
    is_dir INTEGER NOT NULL,
    size INTEGER NOT NULL DEFAULT 0, block_size INTEGER NOT NULL DEFAULT 0, hw INTEGER NOT NULL DEFAULT 0,
    layout TEXT NOT NULL DEFAULT '[]', status TEXT NOT NULL DEFAULT 'ready',
    version INTEGER NOT NULL DEFAULT 1, written TEXT NOT NULL DEFAULT '[]', damaged TEXT NOT NULL DEFAULT '[]',
    mtime REAL NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS fences(fid INTEGER PRIMARY KEY, wmin INTEGER NOT NULL, rmin INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS rio(job TEXT PRIMARY KEY, rate REAL NOT NULL);
CREATE TABLE IF NOT EXISTS history(n INTEGER PRIMARY KEY AUTOINCREMENT, t REAL NOT NULL, info TEXT NOT NULL);
"""


def normalize(path: Any) -> str:
    """Absolute normalized form of a file-system path (relative paths start at the root).

    Raises:
        ValueError: not a string, empty, too long, or containing NUL.
    """
    if not isinstance(path, str):
        raise ValueError(f"path must be a string, got {type(path).__name__}")  # noqa: TRY004 - bad path
    if not path or "\0" in path or len(path) > 4096:
        raise ValueError(f"invalid path {path!r}")
    p = posixpath.normpath("/" + path.lstrip("/"))
    return "/" + p.lstrip("/")


class Namespace:
    """SQLite-backed metadata. Mutated only through :meth:`handle` and the elasticity methods called by the
    metadata server's loop (one thread).

    Args:
        db: database file path (``":memory:"`` for tests).
        block_size: default block size of new files.
    """

    def __init__(self, db: str, block_size: int = DEFAULT_BLOCK_SIZE,
                 clock: Callable[[], float] = time.time) -> None:
        self.clock = clock                  # modification times of files and directories
        self.db = sqlite3.connect(db, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(_SCHEMA)
        cols = {r[1] for r in self.db.execute("PRAGMA table_info(files)")}
        for col in ("written", "damaged"):  # databases of older versions
            if col not in cols:
                self.db.execute(f"ALTER TABLE files ADD COLUMN {col} TEXT NOT NULL DEFAULT '[]'")
        if "mtime" not in cols:
            self.db.execute("ALTER TABLE files ADD COLUMN mtime REAL NOT NULL DEFAULT 0")
        self.block_size = block_size
        if self._row("SELECT 1 FROM files WHERE path='/'") is None:
            self.db.execute("INSERT INTO files(fid, path, is_dir) VALUES(0, '/', 1)")

    def close(self) -> None:
        """Close the database."""
        self.db.close()

    # ------------------------------------------------------------ helpers
    def _row(self, sql: str, args: Iterable[Any] = ()) -> sqlite3.Row | None:
        cur = self.db.execute(sql, tuple(args))
        row = cur.fetchone()
        if row is None:
            return None
        return dict(zip([d[0] for d in cur.description], row, strict=True))  # type: ignore[return-value]

    def _rows(self, sql: str, args: Iterable[Any] = ()) -> list[dict[str, Any]]:
        cur = self.db.execute(sql, tuple(args))
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]

    def kv_get(self, key: str, default: Any = None) -> Any:
        """A JSON value of the key-value table."""
        row = self._row("SELECT v FROM kv WHERE k=?", (key,))
        return default if row is None else json.loads(row["v"])

    def kv_set(self, key: str, value: Any) -> None:
        """Set (or with None delete) a JSON value of the key-value table."""
        if value is None:
            self.db.execute("DELETE FROM kv WHERE k=?", (key,))
        else:
            self.db.execute("INSERT OR REPLACE INTO kv(k, v) VALUES(?, ?)", (key, json.dumps(value)))

    def epochs(self) -> dict[int, tuple[int, ...]]:
        """All placement epochs."""
        return {r["eid"]: tuple(json.loads(r["sids"])) for r in self._rows("SELECT eid, sids FROM epochs")}

    def current_epoch(self) -> int | None:
        """The epoch new blocks are placed in (None before any server was commissioned)."""
        return self.kv_get("epoch")

    def replicas(self) -> int:
        """Copies kept of each block (set when the file system is created)."""
        return int(self.kv_get("replicas", 1))

    def lost_sids(self) -> set[int]:
        """Servers declared lost."""
        return {r["sid"] for r in self.servers() if r["state"] == "lost"}

    def set_epochs(self, epochs: Epochs, current: int | None = None) -> None:
        """Store every epoch of ``epochs`` (and the current one)."""
        for eid, sids in epochs.items():
            self.db.execute(
                "INSERT OR REPLACE INTO epochs(eid, sids) VALUES(?, ?)", (eid, json.dumps(list(sids)))
            )
        if current is not None:
            self.kv_set("epoch", current)

    def servers(self) -> list[dict[str, Any]]:
        """Rows of the servers table."""
        return self._rows("SELECT sid, host, addr, state, pid FROM servers ORDER BY sid")

    def server_addrs(self) -> dict[int, str]:
        """Address of every registered, not removed server."""
        return {r["sid"]: r["addr"] for r in self.servers() if r["addr"] and r["state"] != "gone"}

    def file_row(self, fid: int) -> dict[str, Any]:
        """The row of a regular file by id.

        Raises:
            FileNotFoundError: no such file (removed, or replaced by a new file of the same name).
        """
        row = self._row("SELECT * FROM files WHERE fid=? AND is_dir=0", (fid,))
        if row is None:
            raise FileNotFoundError(errno.ENOENT, f"file id {fid} no longer exists")
        return row

    def files(self) -> list[dict[str, Any]]:
        """Rows of every regular file."""
        return self._rows("SELECT * FROM files WHERE is_dir=0 ORDER BY fid")

    def layout(self, row: dict[str, Any]) -> FileLayout:
        """The interval map of a file row."""
        return FileLayout.from_pairs(json.loads(row["layout"]))

    def info(self, row: dict[str, Any]) -> FileInfo:
        """The :class:`FileInfo` reply for a file row."""
        layout = self.layout(row)
        all_epochs = self.epochs()
        epochs = {str(i.epoch): list(all_epochs[i.epoch]) for i in layout.intervals if i.epoch != UNALLOCATED}
        addrs = self.server_addrs()
        servers = {str(s): addrs.get(s, "") for sids in epochs.values() for s in sids}
        return FileInfo(
            row["fid"],
            row["path"],
            row["size"],
            row["block_size"],
            row["hw"],
            layout.to_pairs(),
            row["status"],
            row["version"],
            epochs,
            servers,
            json.loads(row["written"]),
            json.loads(row["damaged"]),
            self.replicas(),
        )

    def history(self, info: dict[str, Any], t: float) -> None:
        """Append an event (expand, shrink, rule decision, ...) to the history table."""
        self.db.execute("INSERT INTO history(t, info) VALUES(?, ?)", (t, json.dumps(info)))

    def recent_history(self, n: int = 20) -> list[dict[str, Any]]:
        """The last ``n`` history events, oldest first."""
        rows = self._rows("SELECT t, info FROM history ORDER BY n DESC LIMIT ?", (n,))
        return [dict(json.loads(r["info"]), t=r["t"]) for r in reversed(rows)]

    def rio(self) -> float:
        """Sum of the requested I/O rates (MB/s) declared by jobs."""
        row = self._row("SELECT COALESCE(SUM(rate), 0.0) AS r FROM rio")
        return float(row["r"]) if row else 0.0

    def _lookup(self, path: str) -> dict[str, Any] | None:
        return self._row("SELECT * FROM files WHERE path=?", (path,))

    def _check_parent(self, path: str) -> None:
        parent = posixpath.dirname(path)
        row = self._lookup(parent)
        if row is None:
            raise FileNotFoundError(errno.ENOENT, f"no such directory: {parent}")
        if not row["is_dir"]:
            raise NotADirectoryError(errno.ENOTDIR, f"not a directory: {parent}")

    def _drop_actions(self, row: dict[str, Any]) -> list[Send]:
        sids = self.layout(row).servers(self.epochs()) - self.lost_sids()
        return [(s, DropFile(row["fid"])) for s in sorted(sids)]

    def _delete_file(self, row: dict[str, Any]) -> list[Send]:
        actions = self._drop_actions(row)
        self.db.execute("DELETE FROM files WHERE fid=?", (row["fid"],))
        self.db.execute("DELETE FROM fences WHERE fid=?", (row["fid"],))
        return actions

    def _create(self, path: str, block_size: int) -> dict[str, Any]:
        eid = self.current_epoch()
        if eid is None:
            raise FsError("the file system has no data servers yet")
        bs = block_size or self.block_size
        if bs < 4096 or bs > 64 << 20:
            raise ValueError(f"block size must be between 4 KiB and 64 MiB, got {bs}")
        self._check_parent(path)
        cur = self.db.execute(
            "INSERT INTO files(path, is_dir, block_size, layout, mtime) VALUES(?, 0, ?, ?, ?)",
            (path, bs, json.dumps(FileLayout.empty().to_pairs()), self.clock()),
        )
        return self.file_row(int(cur.lastrowid or 0))

    # ------------------------------------------------------------ requests
    def handle(self, msg: Message) -> tuple[Message, list[Send]]:
        """Apply one request; returns the reply and the data-server actions to carry out.

        Raises:
            OSError, ValueError, FsError: the request fails (the shell turns this into an error reply);
                nothing was changed.
        """
        self.db.execute("BEGIN IMMEDIATE")
        try:
            out = self._dispatch(msg)
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")
        return out

    def _dispatch(self, msg: Message) -> tuple[Message, list[Send]]:
        fn = _HANDLERS.get(type(msg))
        if fn is None:
            raise ProtocolError(f"metadata server does not handle {msg.TYPE!r} here")
        return fn(self, msg)

    def _add_servers(self, msg: AddServers) -> tuple[Message, list[Send]]:
        sids = []
        if self.current_epoch() is not None:  # commissioning: I/O goes on, the status shows it
            self.db.execute("UPDATE files SET status='commissioning' WHERE is_dir=0 AND status='ready'")
        for h in msg.hosts:
            cur = self.db.execute("INSERT INTO servers(host, state) VALUES(?, 'reserved')", (h,))
            sids.append(int(cur.lastrowid or 0))
        if self.current_epoch() is not None:
            self.kv_set("commissioning", sorted(set(self.kv_get("commissioning", [])) | set(sids)))
        return ServerIds(sids), []

    def _declare_rio(self, msg: DeclareRio) -> tuple[Message, list[Send]]:
        if msg.rio > 0:
            self.db.execute("INSERT OR REPLACE INTO rio(job, rate) VALUES(?, ?)", (msg.job, msg.rio))
        else:
            self.db.execute("DELETE FROM rio WHERE job=?", (msg.job,))
        return Ok(), []

    def _open(self, msg: Open) -> tuple[Message, list[Send]]:
        path = normalize(msg.path)
        mode = msg.mode.replace("b", "")
        if mode not in MODES:
            raise ValueError(f"invalid mode {msg.mode!r}")
        row = self._lookup(path)
        if row is not None and row["is_dir"]:
            raise IsADirectoryError(errno.EISDIR, f"is a directory: {path}")
        actions: list[Send] = []
        if mode[0] == "r":
            if row is None:
                raise FileNotFoundError(errno.ENOENT, f"no such file: {path}")
        elif mode[0] == "x":
            if row is not None:
                raise FileExistsError(errno.EEXIST, f"file exists: {path}")
            row = self._create(path, msg.block_size)
        elif mode[0] == "w":
            if row is not None:  # truncation gives a fresh file id: old blocks can never be read back
                if row["status"] in BLOCKING:
                    raise Busy(f"{path} is being redistributed")
                actions = self._delete_file(row)
            row = self._create(path, msg.block_size)
        elif row is None:  # append
            row = self._create(path, msg.block_size)
        return self.info(row), actions

    def _create_files(self, msg: CreateFiles) -> tuple[Message, list[Send]]:
        eid = self.current_epoch()
        if eid is None:
            raise FsError("the file system has no data servers yet")
        paths = [normalize(p) for p in msg.paths]
        if len(set(paths)) != len(paths):
            raise ValueError("create_files: a path is given twice")
        if any(size > MAX_SIZE for size in msg.lengths):
            raise ValueError(f"create_files: a size beyond {MAX_SIZE} bytes")
        actions: list[Send] = []
        fids, versions = [], []
        for path, size in zip(paths, msg.lengths, strict=True):
            row = self._lookup(path)
            if row is not None:                   # replaced as by open(path, "w"): a fresh file id
                if row["is_dir"]:
                    raise IsADirectoryError(errno.EISDIR, f"is a directory: {path}")
                if row["status"] in BLOCKING:
                    raise Busy(f"{path} is being redistributed")
                actions += self._delete_file(row)
            row = self._create(path, 0)
            blocks = -(-size // row["block_size"])
            layout = FileLayout.empty().allocate(0, blocks, eid)
            self.db.execute("UPDATE files SET hw=?, layout=? WHERE fid=?",
                            (blocks, json.dumps(layout.to_pairs()), row["fid"]))
            fids.append(row["fid"])
            versions.append(row["version"])
        sids = self.epochs()[eid]
        addrs = self.server_addrs()
        return Created(fids, versions, self.block_size, eid, list(sids), {str(s): addrs.get(s, "") for s in sids},
                       self.replicas()), actions

    def _open_files(self, msg: OpenFiles) -> tuple[Message, list[Send]]:
        paths = [normalize(p) for p in msg.paths]
        rows = []
        for path in paths:
            row = self._lookup(path)
            if row is None:
                raise FileNotFoundError(errno.ENOENT, f"no such file: {path}")
            if row["is_dir"]:
                raise IsADirectoryError(errno.EISDIR, f"is a directory: {path}")
            rows.append(row)
        layouts = [self.layout(row) for row in rows]
        all_epochs = self.epochs()
        epochs = {str(i.epoch): list(all_epochs[i.epoch])
                  for lay in layouts for i in lay.intervals if i.epoch != UNALLOCATED}
        addrs = self.server_addrs()
        return Opened([r["fid"] for r in rows], [r["version"] for r in rows], [r["size"] for r in rows],
                      [r["block_size"] for r in rows], [int(json.loads(r["damaged"]) != []) for r in rows],
                      [[i, *pair] for i, lay in enumerate(layouts) for pair in lay.to_pairs()], epochs,
                      {str(s): addrs.get(s, "") for sids in epochs.values() for s in sids}, self.replicas()), []

    def _publish(self, msg: Publish) -> tuple[Message, list[Send]]:
        for fid, size in zip(msg.fids, msg.lengths, strict=True):
            row = self.file_row(fid)
            if row["status"] in BLOCKING:
                raise Busy(f"{row['path']} is being redistributed; writes wait")
            if size > MAX_SIZE:
                raise ValueError(f"publish: a size beyond {MAX_SIZE} bytes")
            blocks = -(-size // row["block_size"])
            if self.layout(row).any_unallocated(0, blocks):
                raise ValueError(f"publish: {row['path']} has no blocks allocated for {size} bytes")
            written = merge_ranges(json.loads(row["written"]), [[0, blocks]] if blocks else [])
            self.db.execute("UPDATE files SET size=?, written=?, mtime=? WHERE fid=?",
                            (max(row["size"], size), json.dumps(written), self.clock(), fid))
        return Ok(), []

    def _extend(self, msg: Extend) -> FileInfo:
        row = self.file_row(msg.fid)
        if row["status"] in BLOCKING:
            raise Busy(f"{row['path']} is being redistributed; writes wait")
        layout = self.layout(row)
        if layout.any_unallocated(msg.first, msg.blocks):  # blocks written now use the current epoch
            eid = self.current_epoch()
            if eid is None:
                raise FsError("the file system has no data servers")
            layout = layout.allocate(msg.first, msg.blocks, eid)
        hw = max(row["hw"], msg.blocks)
        size = max(row["size"], msg.size)
        written = json.loads(row["written"])
        if msg.written:
            if any(len(r) != 2 or r[0] >= r[1] for r in msg.written):
                raise ValueError("extend: written ranges must be [start, end) with start < end")
            written = merge_ranges(written, msg.written)
            if len(written) > MAX_RANGES:
                raise FsError(f"{row['path']}: more than {MAX_RANGES} separate written ranges")
        self.db.execute(
            "UPDATE files SET hw=?, size=?, layout=?, written=?, mtime=? WHERE fid=?",
            (hw, size, json.dumps(layout.to_pairs()), json.dumps(written), self.clock(), msg.fid),
        )
        return self.info(self.file_row(msg.fid))

    def _set_size(self, msg: SetSize) -> tuple[Message, list[Send]]:
        row = self.file_row(msg.fid)
        if row["status"] in BLOCKING:
            raise Busy(f"{row['path']} is being redistributed; writes wait")
        actions: list[Send] = []
        if msg.size < row["size"]:
            bs = row["block_size"]
            keep = -(-msg.size // bs)
            cut = msg.size // bs if msg.size % bs else None
            drop = DropBlocks(msg.fid, [], from_block=keep, cut_block=cut, cut_len=msg.size % bs)
            actions = [(s, drop) for s in sorted(self.layout(row).servers(self.epochs()) - self.lost_sids())]
            self.db.execute(
                "UPDATE files SET written=?, damaged=? WHERE fid=?",
                (
                    json.dumps(clip_ranges(json.loads(row["written"]), keep)),
                    json.dumps(clip_ranges(json.loads(row["damaged"]), keep)),
                    msg.fid,
                ),
            )
        self.db.execute("UPDATE files SET size=?, mtime=? WHERE fid=?", (msg.size, self.clock(), msg.fid))
        return self.info(self.file_row(msg.fid)), actions

    def _stat(self, path: str) -> StatReply:
        row = self._lookup(path)
        if row is None:
            raise FileNotFoundError(errno.ENOENT, f"no such file or directory: {path}")
        bs = row["block_size"]
        nblocks = -(-row["size"] // bs) if bs else 0
        status = "damaged" if row["status"] == "ready" and json.loads(row["damaged"]) else row["status"]
        return StatReply(path, bool(row["is_dir"]), row["size"], bs, row["fid"], status, nblocks, row["mtime"])

    def _children(self, path: str) -> list[dict[str, Any]]:
        prefix = path.rstrip("/") + "/"
        return self._rows(
            "SELECT path, is_dir, size FROM files WHERE substr(path, 1, ?) = ? AND path != '/' "
            "AND instr(substr(path, ?), '/') = 0 ORDER BY path",
            (len(prefix), prefix, len(prefix) + 1),
        )

    def _listdir(self, path: str, detail: bool = False) -> Names | Entries:
        row = self._lookup(path)
        if row is None:
            raise FileNotFoundError(errno.ENOENT, f"no such directory: {path}")
        if not row["is_dir"]:
            raise NotADirectoryError(errno.ENOTDIR, f"not a directory: {path}")
        rows = self._children(path)
        names = [posixpath.basename(r["path"]) for r in rows]
        if not detail:
            return Names(names)
        return Entries(names, [int(r["is_dir"]) for r in rows], [int(r["size"]) for r in rows])

    def _mkdir(self, path: str, exist_ok: bool) -> Ok:
        row = self._lookup(path)
        if row is not None:
            if exist_ok and row["is_dir"]:
                return Ok()
            raise FileExistsError(errno.EEXIST, f"file exists: {path}")
        self._check_parent(path)
        self.db.execute("INSERT INTO files(path, is_dir, mtime) VALUES(?, 1, ?)", (path, self.clock()))
        return Ok()

    def _remove(self, path: str) -> tuple[Message, list[Send]]:
        row = self._lookup(path)
        if row is None:
            raise FileNotFoundError(errno.ENOENT, f"no such file or directory: {path}")
        if row["is_dir"]:
            if path == "/":
                raise PermissionError(errno.EACCES, "cannot remove the root directory")
            if self._children(path):
                raise OSError(errno.ENOTEMPTY, f"directory not empty: {path}")
            self.db.execute("DELETE FROM files WHERE fid=?", (row["fid"],))
            return Ok(), []
        if row["status"] in BLOCKING:
            raise Busy(f"{path} is being redistributed")
        return Ok(), self._delete_file(row)

    def _rename(self, src: str, dst: str) -> tuple[Message, list[Send]]:
        row = self._lookup(src)
        if row is None:
            raise FileNotFoundError(errno.ENOENT, f"no such file or directory: {src}")
        if src == "/" or dst == src or dst.startswith(src.rstrip("/") + "/"):
            raise ValueError(f"cannot rename {src} to {dst}")
        self._check_parent(dst)
        actions: list[Send] = []
        old = self._lookup(dst)
        if old is not None:
            if old["is_dir"]:
                raise IsADirectoryError(errno.EISDIR, f"is a directory: {dst}")
            if row["is_dir"]:
                raise NotADirectoryError(errno.ENOTDIR, f"not a directory: {dst}")
            actions = self._delete_file(old)
        self.db.execute("UPDATE files SET path=? WHERE fid=?", (dst, row["fid"]))
        if row["is_dir"]:
            prefix = src.rstrip("/") + "/"
            self.db.execute(
                "UPDATE files SET path = ? || substr(path, ?) WHERE substr(path, 1, ?) = ?",
                (dst.rstrip("/") + "/", len(prefix) + 1, len(prefix), prefix),
            )
        return Ok(), actions

    def _register(self, msg: Register) -> Registered:
        row = self._row("SELECT state FROM servers WHERE sid=?", (msg.sid,))
        if row is None or row["state"] in ("gone", "lost"):
            state = "declared lost" if row is not None and row["state"] == "lost" else "unknown or removed"
            raise ValueError(f"data server id {msg.sid} is {state}: add a new server with 'malleable fs expand'")
        state = "up" if row["state"] == "reserved" else row["state"]
        self.db.execute(
            "UPDATE servers SET addr=?, host=?, pid=?, state=? WHERE sid=?",
            (msg.addr, msg.host, msg.pid, state, msg.sid),
        )
        fences = [[r["fid"], r["wmin"], r["rmin"]] for r in self._rows("SELECT * FROM fences")]
        return Registered(fences)


_HANDLERS: dict[type, Callable[[Namespace, Any], tuple[Message, list[Send]]]] = {
    Open: Namespace._open,
    CreateFiles: Namespace._create_files,
    Publish: Namespace._publish,
    OpenFiles: Namespace._open_files,
    Extend: lambda ns, m: (ns._extend(m), []),
    GetLayout: lambda ns, m: (ns.info(ns.file_row(m.fid)), []),
    SetSize: Namespace._set_size,
    Stat: lambda ns, m: (ns._stat(normalize(m.path)), []),
    ListDir: lambda ns, m: (ns._listdir(normalize(m.path)), []),
    ScanDir: lambda ns, m: (ns._listdir(normalize(m.path), detail=True), []),
    Mkdir: lambda ns, m: (ns._mkdir(normalize(m.path), m.exist_ok), []),
    Remove: lambda ns, m: ns._remove(normalize(m.path)),
    Rename: lambda ns, m: ns._rename(normalize(m.src), normalize(m.dst)),
    Register: lambda ns, m: (ns._register(m), []),
    AddServers: Namespace._add_servers,
    DeclareRio: Namespace._declare_rio,
}
"""One handler per request type of the namespace: the reply and the messages to send to data servers."""
