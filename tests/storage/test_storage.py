"""The storage module's contract, on a local folder and on a real S3 endpoint (moto's server)."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest
from pyarrow import ipc

from walspark.storage import Location, StorageSettings, location, spark_conf_from_env
from walspark.storage.layout import TargetLayout


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path) -> Location:
    if request.param == "local":
        return location(tmp_path / "state")
    endpoint = request.getfixturevalue("s3_endpoint")
    bucket = endpoint.bucket("storage")
    return location(f"s3a://{bucket}/lake/_walspark", endpoint.settings())


def test_write_read_list_delete(root: Location) -> None:
    folder = (root / "segments").make_dirs()
    assert folder.list() == [] and not (folder / "a").exists()
    (folder / "b.json").write_json({"n": 2})
    (folder / "a.bin").write(b"\x00" * 10)
    (root / "segments" / "sub").make_dirs()
    (root / "segments" / "sub" / "c").write(b"c")
    assert [e.name for e in folder.list()] == ["a.bin", "b.json", "sub"]
    assert (folder / "b.json").read_json() == {"n": 2} and (folder / "a.bin").size() == 10
    assert (folder / "missing").read_json("none") == "none"
    with pytest.raises(FileNotFoundError):
        (folder / "missing").read_bytes()
    with pytest.raises(FileNotFoundError):
        (folder / "missing").size()
    assert (folder / "a.bin").delete() and not (folder / "a.bin").delete()
    assert [e.name for e in folder.list()] == ["b.json", "sub"]
    folder.delete_tree()
    assert folder.list() == [] and not (folder / "b.json").exists()


def test_replace_is_whole_and_leaves_no_sibling(root: Location) -> None:
    doc = root / "snapshot.json"
    doc.write_json({"state": "in_progress"}, indent=2)
    doc.write_json({"state": "complete"}, indent=2)
    assert doc.read_json() == {"state": "complete"}
    assert [e.name for e in root.list()] == ["snapshot.json"]  # the local sibling was renamed away


def test_an_open_copy_stays_readable_after_delete(root: Location) -> None:
    entry = root / "x.prepared"
    entry.write(b"abc" * 1000)
    with entry.open_read() as f:
        entry.delete()
        assert f.read() == b"abc" * 1000
    with pytest.raises(FileNotFoundError):
        entry.open_read()


def test_arrow_files_are_read_at_random(root: Location) -> None:
    table = pa.table({"x": list(range(1000))})
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    (root / "t.arrow").write(sink.getvalue())
    with (root / "t.arrow").open_arrow() as source:
        assert ipc.open_file(source).read_all().equals(table)


def test_a_location_travels_to_executors_with_its_settings(root: Location) -> None:
    (root / "f").write(b"1")
    again = pickle.loads(pickle.dumps(root / "f"))
    assert again == root / "f" and again.read_bytes() == b"1"
    assert again.uri == (root / "f").uri


def test_uris_map_to_their_filesystems(tmp_path) -> None:
    assert location(f"file://{tmp_path}").is_local and location(f"file:{tmp_path}").local_path == tmp_path
    s3 = location("s3a://bucket/a/b", StorageSettings(endpoint="http://127.0.0.1:1", access_key="k", secret_key="s"))
    assert (s3.uri, s3.path, (s3 / "c").uri, s3.parent.uri) == ("s3a://bucket/a/b", "bucket/a/b", "s3a://bucket/a/b/c",
                                                                 "s3a://bucket/a")
    with pytest.raises(ValueError, match="ftp"):
        location("ftp://host/x")


def test_secrets_are_never_shown() -> None:
    settings = StorageSettings.from_env({"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "very-secret",
                                         "AWS_SESSION_TOKEN": "tok-secret", "AWS_ENDPOINT_URL": "http://127.0.0.1:9"})
    assert settings.secret_key == "very-secret" and settings.path_style and settings.ssl is False
    for text in (repr(settings), str(settings), repr(location("s3a://b/x", settings)), f"{settings}"):
        assert "very-secret" not in text and "tok-secret" not in text
    assert "<redacted>" in repr(settings)
    # the data source's options round-trip, under Hadoop's key names (which Spark redacts)
    assert StorageSettings.from_hadoop(settings.to_options()) == settings


def test_hadoop_settings_win_over_the_environment_and_reach_spark() -> None:
    env = {"AWS_ACCESS_KEY_ID": "env-key", "AWS_SECRET_ACCESS_KEY": "env-secret", "AWS_ENDPOINT_URL": "http://h:1"}
    conf = {"spark.hadoop.fs.s3a.access.key": "conf-key", "spark.hadoop.fs.s3a.secret.key": "conf-secret",
            "spark.hadoop.fs.s3a.endpoint": "http://h:2", "spark.hadoop.fs.s3a.path.style.access": "true"}
    assert StorageSettings.resolve(conf, env).access_key == "conf-key"
    assert StorageSettings.resolve({}, env).endpoint == "http://h:1"
    assert spark_conf_from_env(conf, env) == {}  # explicit settings are kept as they are
    merged = spark_conf_from_env({}, env)
    assert merged["spark.hadoop.fs.s3a.access.key"] == "env-key"
    assert merged["spark.hadoop.fs.s3a.endpoint"] == "http://h:1"
    assert merged["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert merged["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert spark_conf_from_env({}, {}) == {}


def test_segments_on_the_store(root: Location) -> None:
    """Staged segments: written whole, listed in order, read back, the unfinished tail removed."""
    from walspark.staging.offsets import TxnEntry
    from walspark.staging.segments import (
        SegmentBuilder,
        SegmentMeta,
        delete_through,
        list_segments,
        read_segment,
        remove_incomplete_tail,
        write_segment,
    )

    folder = root / "staging" / "segments"
    for seq, end in enumerate((10, 20)):
        b = SegmentBuilder()
        b.append(end, end - 1, 7, 0, None, end - 2, 0, False, b"I-data")
        write_segment(folder, seq, b.to_batch(), SegmentMeta(2, False, False, (TxnEntry(end, 1, 6),)),
                      first_end=end, last_end=end)
    b = SegmentBuilder()
    b.append(30, 29, 8, 0, None, 28, 0, False, b"piece")
    write_segment(folder, 2, b.to_batch(), SegmentMeta(2, False, False, ()), first_end=30, last_end=30)
    assert [s.seq for s in list_segments(folder)] == [0, 1, 2]
    assert [s.seq for s in remove_incomplete_tail(folder)] == [0, 1]  # a transaction's unfinished pieces
    [_, second] = list_segments(folder)
    table, meta = read_segment(pickle.loads(pickle.dumps(second.path)))  # as an executor gets it
    assert table.column("data").to_pylist() == [b"I-data"] and meta.txns == (TxnEntry(20, 1, 6),)
    assert delete_through(folder, 10) == 1 and [s.seq for s in list_segments(folder)] == [1]


def test_prepared_store_on_the_store(root: Location) -> None:
    """A committed prepared transaction is marked, not renamed; the mark survives a reload; release deletes both."""
    from tests.spark.test_prepared_store import _prepared, _values
    from walspark.staging.prepared import PreparedStore

    store = PreparedStore(root / "prepared").load()
    txn = _prepared(3, "g", "a")
    entry = store.put(txn, [])
    txn.release()
    store.resolve(entry, 0x5010)
    assert sorted(e.name.rsplit(".", 1)[-1] for e in (root / "prepared").list()) == ["committed", "prepared"]
    again = PreparedStore(root / "prepared").load()
    assert again.get(3, "g").committed_end == 0x5010
    held = again.committed(again.get(3, "g"), commit_lsn=0x5000, end_lsn=0x5010, timestamp=1)
    assert again.release_through(0x6000) == 1
    assert _values(held)[-1].endswith(b"a")  # still readable: released while being staged
    held.release()
    assert [e.name for e in (root / "prepared").list()] == ["committed-through"]


def test_the_data_source_takes_the_settings_as_options() -> None:
    from walspark.spark.datasource.options import SourceOptions

    settings = StorageSettings(access_key="k", secret_key="s3cr3t", endpoint="http://127.0.0.1:9", path_style=True,
                               ssl=False, region="eu-west-1")
    parsed = SourceOptions.parse({"dsn": "host=x", "slot": "s", "publication": "p", "stagingPath": "s3a://b/st",
                                  **settings.to_options()})
    assert parsed.storage == settings and "s3cr3t" not in repr(parsed)
    assert parsed.staging_location().settings == settings


def test_run_takes_spark_settings_like_spark_submit() -> None:
    import click

    from walspark.cli.options import parse_confs
    from walspark.pipeline import RunSettings
    from walspark.spark.lake.progress import ProgressTable

    assert parse_confs(("spark.hadoop.fs.s3a.endpoint=http://h:1", "a=b=c", "a=d")) == {
        "spark.hadoop.fs.s3a.endpoint": "http://h:1", "a": "d"}
    with pytest.raises(click.BadParameter):
        parse_confs(("no-value",))
    settings = RunSettings("dsn", "pub", "slot", "s3a://b/lake", state="s3a://b/state/")
    assert (settings.checkpoint, settings.staging) == ("s3a://b/state/checkpoints/slot", "s3a://b/state/staging/slot")
    assert RunSettings("dsn", "pub", "slot", "s3a://b/lake/").staging == "s3a://b/lake/_walspark/staging/slot"
    # the progress table follows --state too (its own Delta table beside the checkpoint)
    assert ProgressTable(None, TargetLayout("s3a://b/lake", "s3a://b/state/")).path == "s3a://b/state/progress"  # type: ignore[arg-type]
    assert ProgressTable(None, TargetLayout("s3a://b/lake/")).path == "s3a://b/lake/_walspark/progress"  # type: ignore[arg-type]
