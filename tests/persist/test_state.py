"""The SQLite state: survives a reopen, keeps open launch requests, names a bad file."""

import pytest

from wire_daemon.core.errors import InputError
from wire_daemon.core.instances import LifecycleState
from wire_daemon.persist.store import InstanceRecord, StateStore


def test_everything_survives_a_reopen(tmp_path):
    path = tmp_path / "state.sqlite"
    store = StateStore(path)
    daemon = store.daemon_id()
    request = store.open_request(2, now=10.0)
    store.record_instance(InstanceRecord("i-1", request, 11.0, 11.0, 4, "10.0.0.5", LifecycleState.BOOTING))
    store.save_position("wf-a/events", {"offset": 1234, "inode": 7})
    store.close()

    again = StateStore(path)
    assert again.daemon_id() == daemon
    assert [r.request_id for r in again.open_requests()] == [request]
    assert again.instances()[0].address == "10.0.0.5"
    assert again.load_position("wf-a/events") == {"offset": 1234, "inode": 7}


def test_requests_close_and_instances_end(tmp_path):
    store = StateStore(tmp_path / "s.sqlite")
    request = store.open_request(1, now=0.0)
    store.record_instance(InstanceRecord("i-1", request, 1.0, 1.0, 4, "", LifecycleState.JOINED))
    store.close_request(request)
    assert store.open_requests() == []
    store.mark_ended("i-1", "released: unit ends", now=50.0)
    assert store.instances() == []
    (ended,) = store.instances(live_only=False)
    assert (ended.state, ended.ended_at, ended.end_reason) == ("terminated", 50.0, "released: unit ends")


def test_positions_are_forgotten_by_prefix_only(tmp_path):
    store = StateStore(tmp_path / "s.sqlite")
    store.save_position("wf_1/a", {"o": 1})
    store.save_position("wf_1/b", {"o": 2})
    store.save_position("wfX1/c", {"o": 3})  # '_' is not a wildcard here
    store.forget_positions("wf_1/")
    assert store.load_position("wf_1/a") is None and store.load_position("wfX1/c") == {"o": 3}


def test_a_schema_3_file_loses_its_copy_of_the_decisions_and_keeps_the_rest(tmp_path):
    """The decisions log is the record of what was decided: the state file keeps no second, unbounded copy."""
    import sqlite3

    path = tmp_path / "old.sqlite"
    StateStore(path).close()
    db = sqlite3.connect(path)  # rewrite it as a schema-3 file, decisions copied in
    db.execute("CREATE TABLE decisions (seq INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, record TEXT)")
    db.executemany("INSERT INTO decisions (time, record) VALUES (?, ?)", [(t, "{}") for t in (0.0, 180.0)])
    db.execute("INSERT INTO meta VALUES ('daemon_id', 'abc')")
    db.execute("PRAGMA user_version = 3")
    db.commit()
    db.close()

    store = StateStore(path)
    tables = {name for (name,) in store._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "decisions" not in tables and {"meta", "instances", "controls"} <= tables
    assert store.daemon_id() == "abc"
    store.close()


def test_a_garbage_file_is_named(tmp_path):
    bad = tmp_path / "state.sqlite"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(InputError, match="state.sqlite"):
        StateStore(bad)


def test_lifecycle_states_persist_and_a_schema_1_file_is_migrated(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite"
    StateStore(path).close()
    db = sqlite3.connect(path)  # rewrite it as a schema-1 file: the cloud's word in the state column
    db.execute("ALTER TABLE instances DROP COLUMN release_at")  # not there before schema 4
    db.execute("PRAGMA user_version = 1")
    rows = [
        ("i-live", "running", None, None),
        ("i-gone", "terminated", 9.0, "vanished"),
        ("i-ours", "terminated", 9.0, "released"),
    ]
    for instance_id, state, ended, reason in rows:
        db.execute("INSERT INTO instances VALUES (?, NULL, 0, 0, 4, '', ?, ?, ?)", (instance_id, state, ended, reason))
    db.commit()
    db.close()

    store = StateStore(path)
    states = {r.instance_id: r.state for r in store.instances(live_only=False)}
    assert states == {
        "i-live": LifecycleState.BOOTING,
        "i-gone": LifecycleState.VANISHED,
        "i-ours": LifecycleState.TERMINATED,
    }
    store.set_lifecycle("i-live", LifecycleState.DRAINING)
    store.close()
    assert StateStore(path).instances()[0].state == LifecycleState.DRAINING


def test_a_planned_end_survives_a_reopen_and_a_schema_3_file_gains_the_column(tmp_path):
    import sqlite3

    path = tmp_path / "v3.sqlite"
    StateStore(path).close()
    db = sqlite3.connect(path)  # a schema-3 file: instances without release_at
    db.execute("ALTER TABLE instances DROP COLUMN release_at")
    db.execute("INSERT INTO instances VALUES ('i-old', NULL, 0, 0, 4, '', 'joined', NULL, NULL)")
    db.execute("PRAGMA user_version = 3")
    db.commit()
    db.close()

    store = StateStore(path)
    assert [(r.instance_id, r.state, r.release_at) for r in store.instances()] == [
        ("i-old", LifecycleState.JOINED, None)
    ]
    store.set_lifecycle("i-old", LifecycleState.DRAINING)
    store.set_release_at("i-old", 3540.0)
    store.close()
    assert StateStore(path).instances()[0].release_at == 3540.0
