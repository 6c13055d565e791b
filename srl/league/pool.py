"""The policy pool: frozen versions of the policy, their tags and metadata, and the games
played against them, in one SQLite file in the run directory.

    pool = Pool(RunPaths(run_dir).pool)
    entry = pool.add(version=120, env_steps=1_500_000, path="v-000000120.pt", tags=["snapshot"],
                     metadata={"rating": {"mu": 27.1, "sigma": 1.9}})
    pool.record_match(player_version=130, opponent=entry.id, wins=20, draws=5, losses=7)
    for e in pool.entries():                 # oldest first, with the games against each
        print(e.version, e.tags, e.metadata["rating"], e.win_rate)

Every process of a run opens the file itself (an embedded store, no server): the league
worker writes snapshots and match results, actors read the entries to draw opponents. SQLite
serialises the writers; each write is one short transaction (`BEGIN IMMEDIATE`), and a
writer or reader that finds the file locked waits up to `timeout_s`. The file uses SQLite's
rollback journal, not WAL: WAL keeps its index in shared memory, which works only on one
host, while a run that spans hosts reaches its run directory through a shared filesystem.

Weights stay in files beside the database (the checkpoint format, so `srl evaluate` plays
them as they are); an entry holds the file's name, relative to the database's directory.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_SCHEMA = """
CREATE TABLE IF NOT EXISTS versions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    version INTEGER NOT NULL,           -- the trainer's policy version
    env_steps INTEGER NOT NULL,         -- the run's env steps when it was taken
    path TEXT NOT NULL,                 -- its weights, relative to the pool's directory
    created REAL NOT NULL,              -- unix time
    metadata TEXT NOT NULL DEFAULT '{}' -- JSON: rating, eval scores, anything a writer adds
);
CREATE TABLE IF NOT EXISTS tags (
    version_id INTEGER NOT NULL REFERENCES versions(id) ON DELETE CASCADE,
    tag TEXT NOT NULL,
    PRIMARY KEY (version_id, tag)
);
CREATE TABLE IF NOT EXISTS matches (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created REAL NOT NULL,
    env_steps INTEGER NOT NULL,
    player_version INTEGER NOT NULL,    -- the version that played (the newest, in a league)
    opponent_id INTEGER NOT NULL REFERENCES versions(id) ON DELETE CASCADE,
    wins INTEGER NOT NULL, draws INTEGER NOT NULL, losses INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS matches_by_opponent ON matches (opponent_id, id);
CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


@dataclass
class Entry:
    """One frozen version in the pool, with the games played against it (all, or the recent
    ones `entries(recent=...)` asked for), counted from the player's side."""

    id: int
    version: int
    env_steps: int
    path: Path
    created: float
    tags: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    wins: int = 0
    draws: int = 0
    losses: int = 0

    @property
    def games(self) -> int:
        return self.wins + self.draws + self.losses

    @property
    def win_rate(self) -> float:
        """The player's score against this version, draws counting half, with one won and one
        lost game of prior: 0.5 before any game, never exactly 0 or 1."""
        return (self.wins + 0.5 * self.draws + 1.0) / (self.games + 2.0)


class Pool:
    """The pool in the SQLite file `path` (created with its directory if missing)."""

    def __init__(self, path: str | Path, timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Autocommit: reads take no lock past their statement; writes open their own transaction.
        self._db = sqlite3.connect(self.path, timeout=timeout_s, isolation_level=None)
        self._db.execute("PRAGMA foreign_keys = ON")
        with self._write():  # one transaction: processes opening a new pool together create it once
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    self._db.execute(statement)

    # ------------------------------------------------------------------ writing
    def _write(self) -> _Transaction:
        return _Transaction(self._db)

    def add(self, version: int, env_steps: int, path: str | Path, tags: Iterable[str] = (),
            metadata: Mapping[str, Any] | None = None) -> Entry:
        """Add a version (its weights already written at `path`, relative to the pool's directory)."""
        with self._write():
            cursor = self._db.execute(
                "INSERT INTO versions (version, env_steps, path, created, metadata) VALUES (?, ?, ?, ?, ?)",
                (int(version), int(env_steps), str(path), time.time(), json.dumps(dict(metadata or {}))))
            entry_id = int(cursor.lastrowid)
            self._db.executemany("INSERT OR IGNORE INTO tags VALUES (?, ?)", [(entry_id, t) for t in tags])
        got = self.get(entry_id)
        assert got is not None
        return got

    def tag(self, entry_id: int, *tags: str) -> None:
        with self._write():
            self._db.executemany("INSERT OR IGNORE INTO tags VALUES (?, ?)", [(entry_id, t) for t in tags])

    def untag(self, entry_id: int, *tags: str) -> None:
        with self._write():
            self._db.executemany("DELETE FROM tags WHERE version_id = ? AND tag = ?", [(entry_id, t) for t in tags])

    def update_metadata(self, entry_id: int, changes: Mapping[str, Any]) -> dict[str, Any]:
        """Merge `changes` into an entry's metadata (top-level keys), atomically; returns the result."""
        with self._write():
            row = self._db.execute("SELECT metadata FROM versions WHERE id = ?", (entry_id,)).fetchone()
            if row is None:
                raise KeyError(f"no version with id {entry_id} in the pool")
            metadata = {**json.loads(row[0]), **changes}
            self._db.execute("UPDATE versions SET metadata = ? WHERE id = ?", (json.dumps(metadata), entry_id))
        return metadata

    def record_match(self, player_version: int, opponent: int, wins: int, draws: int, losses: int,
                     env_steps: int = 0) -> None:
        """Games the player (at `player_version`) played against the entry `opponent`."""
        with self._write():
            self._db.execute(
                "INSERT INTO matches (created, env_steps, player_version, opponent_id, wins, draws, losses) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (time.time(), int(env_steps), int(player_version), int(opponent), int(wins), int(draws), int(losses)))

    def remove(self, entry_id: int) -> Entry | None:
        """Take an entry out (its tags and matches go with it); returns it, so its file can go too."""
        entry = self.get(entry_id)
        if entry is not None:
            with self._write():
                self._db.execute("DELETE FROM versions WHERE id = ?", (entry_id,))
        return entry

    def prune(self, keep: int, protect: str = "initial") -> list[Entry]:
        """Remove the oldest entries past `keep`, never one tagged `protect`; returns those removed."""
        entries = self.entries()
        removable = [e for e in entries if protect not in e.tags]
        removed = []
        for entry in removable[:max(len(entries) - keep, 0)]:
            if self.remove(entry.id) is not None:
                removed.append(entry)
        return removed

    def set_state(self, key: str, value: Any) -> None:
        """A small JSON value of the pool's own (the rated player's current rating, say)."""
        with self._write():
            self._db.execute("INSERT OR REPLACE INTO state VALUES (?, ?)", (key, json.dumps(value)))

    # ------------------------------------------------------------------ reading
    def state(self, key: str, default: Any = None) -> Any:
        row = self._db.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        return default if row is None else json.loads(row[0])

    def get(self, entry_id: int) -> Entry | None:
        found = self._select("WHERE v.id = ?", (entry_id,))
        return found[0] if found else None

    def entries(self, tag: str | None = None, recent: int | None = None) -> list[Entry]:
        """Every entry (or those tagged `tag`), oldest first, with the games played against each:
        all of them, or those of the `recent` newest matches against it."""
        if tag is None:
            return self._select("", (), recent)
        return self._select("WHERE v.id IN (SELECT version_id FROM tags WHERE tag = ?)", (tag,), recent)

    def latest(self) -> Entry | None:
        entries = self.entries()
        return max(entries, key=lambda e: (e.version, e.id)) if entries else None

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM versions").fetchone()[0])

    def _select(self, where: str, args: tuple, recent: int | None = None) -> list[Entry]:
        # One read transaction, so entries, tags and results are of one moment.
        with _Transaction(self._db, "BEGIN"):
            rows = self._db.execute(f"SELECT v.id, v.version, v.env_steps, v.path, v.created, v.metadata "
                                    f"FROM versions v {where} ORDER BY v.id", args).fetchall()
            tags: dict[int, list[str]] = {}
            for entry_id, tag in self._db.execute("SELECT version_id, tag FROM tags ORDER BY tag"):
                tags.setdefault(entry_id, []).append(tag)
            window = "" if recent is None else "WHERE n <= ?"
            results = {row[0]: row[1:] for row in self._db.execute(
                "SELECT opponent_id, SUM(wins), SUM(draws), SUM(losses) FROM ("
                " SELECT *, ROW_NUMBER() OVER (PARTITION BY opponent_id ORDER BY id DESC) AS n FROM matches"
                f") {window} GROUP BY opponent_id", () if recent is None else (int(recent),))}
        out = []
        for entry_id, version, env_steps, path, created, metadata in rows:
            wins, draws, losses = results.get(entry_id, (0, 0, 0))
            out.append(Entry(entry_id, version, env_steps, self.path.parent / path, created,
                             tuple(tags.get(entry_id, ())), json.loads(metadata), int(wins), int(draws), int(losses)))
        return out

    def close(self) -> None:
        self._db.close()


class _Transaction:
    """`BEGIN IMMEDIATE` (a write: the lock is taken up front, so two writers never deadlock
    upgrading) ... `COMMIT`, or `ROLLBACK` on an error."""

    def __init__(self, db: sqlite3.Connection, begin: str = "BEGIN IMMEDIATE") -> None:
        self.db, self.begin = db, begin

    def __enter__(self) -> None:
        self.db.execute(self.begin)

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        self.db.execute("COMMIT" if kind is None else "ROLLBACK")
