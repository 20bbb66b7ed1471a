"""SerializedConnection (index/sqlite_conn.py): one SQLite connection used by many threads at once
returns every statement's own rows, and reads like a cursor."""

from __future__ import annotations

import sqlite3
import threading

from cograg.index.sqlite_conn import SerializedConnection


def shared(tmp_path) -> SerializedConnection:
    conn = SerializedConnection(sqlite3.connect(str(tmp_path / "t.db"), isolation_level=None,
                                                check_same_thread=False))
    conn.execute("CREATE TABLE t(x INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(200)])
    return conn


def test_threads_sharing_one_connection_each_get_their_own_rows(tmp_path):
    conn = shared(tmp_path)
    errors: list[str] = []

    def worker(n: int) -> None:
        for _ in range(200):
            rows = [r[0] for r in conn.execute("SELECT x FROM t WHERE x < ? ORDER BY x", (n,))]
            if rows != list(range(n)):
                errors.append(f"{n}: {rows[:5]}")

    threads = [threading.Thread(target=worker, args=(n,)) for n in (5, 50, 150, 200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    conn.close()


def test_results_read_like_a_cursor(tmp_path):
    conn = shared(tmp_path)
    res = conn.execute("SELECT x FROM t ORDER BY x LIMIT 3")
    assert res.fetchone() == (0,)
    assert res.fetchall() == [(1,), (2,)]
    assert res.fetchone() is None and res.fetchall() == []
    assert conn.execute("SELECT x FROM t WHERE x = -1").fetchone() is None
    ins = conn.execute("INSERT INTO t VALUES (999)")
    assert ins.rowcount == 1 and ins.lastrowid is not None
    conn.execute("BEGIN IMMEDIATE")
    assert conn.in_transaction
    conn.execute("DELETE FROM t")
    conn.execute("ROLLBACK")
    assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 201
    conn.close()
