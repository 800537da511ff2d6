"""Checks that run before anything starts: no Spark job, no slot, no file is touched first.

Everything about the source and the options that can fail without Spark is checked here, so a
wrong DSN, publication or table name costs a second and one clear error, not a half-started
pipeline (and, from the CLI, not thirty seconds of JVM start-up).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from walspark.pipeline.settings import RunSettings, check_options

if TYPE_CHECKING:
    from walspark.storage import Location

__all__ = [
    "SLOT_FREE_SECONDS",
    "check_scd2_tables",
    "check_settings",
    "check_target",
    "needs_snapshot",
    "preflight",
    "slot_gone",
]

#: How long a run waits for its slot to be released by another consumer before it stops: a run
#: killed a moment ago is seen gone by the server within that; one still reading is an error.
SLOT_FREE_SECONDS = 15.0


def check_settings(settings: RunSettings) -> None:
    """The settings' own shape (no connection): a slot name PostgreSQL accepts, a target, a trigger.

    Raises :class:`walspark.source.errors.OptionError` saying which option is wrong.
    """
    from walspark.source.errors import OptionError
    from walspark.source.names import validate_slot_name
    from walspark.source.publications import publication_list

    if not settings.target:
        raise OptionError("target (--target) must be a folder (or a URI such as s3a://bucket/lake)")
    validate_slot_name(settings.slot)
    if not publication_list(settings.publication or ""):  # also validates each name
        raise OptionError("publication (--publication) must name a publication")
    check_options(settings)
    if settings.catalog_schema is not None:
        from walspark.spark.lake.catalog_tables import check_catalog_schema

        try:
            check_catalog_schema(settings.catalog_schema)
        except ValueError as exc:
            raise OptionError(str(exc)) from None


def preflight(settings: RunSettings) -> list[str]:
    """Everything about the source and the options that can fail without Spark, checked first.

    Names, the metrics' port (free), the target (and ``--state``) folder — one this user can make and write in, or an
    object store's bucket that exists — then the DSN, reachability, password, database, ``wal_level``, the REPLICATION attribute,
    the publication, a slot no other consumer reads, and — when this run will take the initial
    snapshot or copy every table again — SELECT on the published tables. ``--scd2`` tables must be
    published (a typo would otherwise silently keep a mirror). A lost slot (invalidated, or gone
    while the target holds its snapshot) stops here, in one line with the fix, unless
    ``--on-slot-loss resnapshot`` (:mod:`walspark.pipeline.slot_loss` then re-creates it). Raises the
    :mod:`walspark.source.errors` class that says what to do; returns the lines that say how a
    failover would cost the slot or changes (:func:`walspark.source.preflight.protection_notes`),
    for the caller to say.
    """
    from walspark.pipeline.metrics import check_metrics_port
    from walspark.pipeline.slot_loss import recreation_unfinished
    from walspark.source.preflight import check_source
    from walspark.spark.snapshot.initial import read_record
    from walspark.storage import StorageSettings, location

    check_settings(settings)
    check_metrics_port(settings)  # a port in use is one line before anything starts
    storage = StorageSettings.resolve(settings.conf)  # Spark may not be up yet
    layout = settings.layout
    check_target(location(layout.target, storage), "--target")
    if settings.state:  # walspark's own files (checkpoint, staging, state) elsewhere: that folder too
        check_target(layout.home_location(storage), "--state")
    record = read_record(layout, storage)
    unfinished = record is not None and record.slot == settings.slot and not record.complete
    held = record is not None and record.complete and record.slot == settings.slot  # the target holds its tables
    resnapshot = settings.on_slot_loss == "resnapshot" and held
    check = check_source(settings.dsn, publications=[settings.publication], slot=settings.slot,
                         slot_free_within=SLOT_FREE_SECONDS, failover=settings.failover_slot,
                         lost_ok=resnapshot)  # fmt: skip
    if not check.slot_exists and held and not resnapshot:
        raise slot_gone(settings)
    if held and not resnapshot:
        # its slot may exist again, but not every table is to be copied again yet
        if recreation_unfinished(layout, settings.slot, storage):
            from walspark.source.errors import SlotInvalidated

            raise SlotInvalidated(f"replication slot {settings.slot!r} was being created again after it was lost "
                                  f"and that did not end: the tables of {settings.target} lack its changes; run "
                                  "with --on-slot-loss resnapshot again")  # fmt: skip
    if unfinished or not check.slot_exists or check.lost:  # a snapshot, or every table copied again
        check_source(settings.dsn, publications=[settings.publication], snapshot=True, replication=False)
    if settings.scd2:
        check_scd2_tables(settings)
    return list(check.notes)


def slot_gone(settings: RunSettings) -> Exception:
    """The error of a slot that is gone while the target holds the tables of its snapshot."""
    from walspark.source.errors import SlotNotFound

    return SlotNotFound(
        f"replication slot {settings.slot!r} is gone from the source (dropped, or lost in a failover to a standby "
        f"that did not have it) while {settings.target} holds its tables: the changes since are lost to them; run with "
        "--on-slot-loss resnapshot (a new slot, every table copied again into this target), or run into a new "
        "--target"
    )


def check_target(home: Location, option: str = "--target") -> None:
    """The folder of walspark's files can be made and written, asked without writing anything: on
    a local disk, the nearest existing folder above it is a folder this user may write in; on an
    object store, the bucket exists for these credentials. Raises
    :class:`walspark.source.errors.OptionError` naming ``option`` and the fix."""
    import os
    from pathlib import Path

    from walspark.source.errors import OptionError

    if home.is_local:
        probe = Path(home.path).absolute()
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        if not probe.is_dir():
            raise OptionError(f"{option}: {probe} is a file, not a folder; give a folder (or a URI such as "
                              "s3a://bucket/lake)")  # fmt: skip
        if not os.access(probe, os.W_OK | os.X_OK):
            raise OptionError(f"{option}: this user cannot write in {probe}; give a folder it may write in, "
                              "or grant it (chown, chmod)")  # fmt: skip
        return
    if home.prefix.startswith("hdfs"):
        return  # HDFS answers through Spark's own client: checked when the run writes
    import pyarrow.fs as pafs

    bucket = home.path.split("/", 1)[0]
    try:
        found = home.fs.get_file_info(bucket).type != pafs.FileType.NotFound
    except OSError as exc:
        reason = " ".join(str(exc).split())[:200]
        raise OptionError(
            f"{option}: the object store did not answer for bucket {bucket!r} ({reason}); check the "
            "endpoint and the credentials (AWS_* variables or --conf spark.hadoop.fs.s3a.*)"
        ) from None
    if not found:
        raise OptionError(
            f"{option}: bucket {bucket!r} does not exist (or these credentials cannot see it); "
            "create it, or check the credentials (AWS_* variables or --conf spark.hadoop.fs.s3a.*)"
        )


def check_scd2_tables(settings: RunSettings) -> None:
    """Every ``--scd2`` table must be published by one of the ``--publication`` list's publications.

    ``--publication`` is a comma-separated list (:func:`publication_list`, as the stream and the
    snapshot read it); the tables streamed are the union of the publications' tables.
    """
    from walspark.source.connect import connect_sql
    from walspark.source.errors import OptionError
    from walspark.source.publications import get_publication, publication_list

    names = publication_list(settings.publication)
    published: set[str] = set()
    with connect_sql(settings.dsn) as conn:
        for name in names:
            info = get_publication(conn, name)
            published.update(info.tables if info is not None else ())
    which = f"publication {names[0]!r}" if len(names) == 1 else "publications " + ", ".join(repr(n) for n in names)
    for table in settings.scd2:
        if table not in published:
            raise OptionError(
                f"--scd2 {table!r} is not a table of {which} "
                f"(their tables: {', '.join(sorted(published)) or 'none'}); use schema.table"
            )


def needs_snapshot(settings: RunSettings) -> bool:
    """A missing slot, or a snapshot of this slot that did not complete, means (re)snapshot."""
    import psycopg

    from walspark.source.slots import get_slot
    from walspark.spark.snapshot.initial import read_record

    record = read_record(settings.layout)
    if record is not None and record.slot == settings.slot and not record.complete:
        return True
    with psycopg.connect(settings.dsn, autocommit=True) as conn:
        return get_slot(conn, settings.slot) is None
