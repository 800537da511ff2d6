"""A class-data-sharing archive of the driver JVM: Spark's classes loaded from a memory map.

Made once (:func:`build`), mapped by every later session (:func:`java_options`), ignored by the
JVM when it does not match. See docs/design/fixed-costs.md ("The class archive").
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["CDS_ENV", "archive_path", "build", "java_options"]

#: ``0`` turns the archive off; the path of a file to write makes the JVM archive at exit (build).
CDS_ENV = "WALSPARK_CDS"
#: The JVM's own messages about archives it cannot map: off, the fallback is silent by design.
_QUIET = "-Xlog:cds=off,cds+dynamic=off"


def _java() -> str:
    """The java binary Spark's launcher will run (``$JAVA_HOME/bin/java``, else the PATH's)."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java") or "java"
    return os.path.realpath(found)


def archive_path() -> Path:
    """Where this environment's archive is (whether it exists yet or not)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    key = hashlib.sha256(f"{pyspark.__version__}|{jars}|{_java()}".encode()).hexdigest()[:16]
    if sys.prefix != sys.base_prefix:  # a virtual environment: the archive goes (and is removed) with it
        folder = Path(sys.prefix) / "share" / "walspark"
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        folder = Path(base) / "walspark" / "cds"
    return folder / f"driver-{key}.jsa"


def java_options() -> str:
    """The driver JVM's options for the archive: map it when it exists, write it when building."""
    setting = os.environ.get(CDS_ENV, "1")
    if setting == "0":
        return ""
    if setting not in ("", "1"):  # build(): this JVM writes the archive when it exits
        return f"-XX:ArchiveClassesAtExit={setting} {_QUIET}"
    path = archive_path()
    return f"-XX:SharedArchiveFile={path} {_QUIET}" if path.is_file() else ""


#: The warm-up run of :func:`build`, in a child process of its own (its JVM's exit writes the
#: archive): one table copied, then changed, through the pipeline's own code.
_WARM_UP = """
import shutil, sys, tempfile
import psycopg
from pyspark import SparkContext
from walspark import Pipeline
from walspark.embedded.postgres import EmbeddedPostgres
from walspark.spark.session import spark_session

work = tempfile.mkdtemp(prefix="walspark-cds-")
try:
    with EmbeddedPostgres() as pg, psycopg.connect(pg.dsn(), autocommit=True) as conn:
        conn.execute("CREATE TABLE warm (id int PRIMARY KEY, name text, price numeric(12, 2), at timestamptz)")
        conn.execute("INSERT INTO warm SELECT g, 'n' || g, g * 1.5, now() FROM generate_series(1, 100) g")
        conn.execute("CREATE PUBLICATION warm_pub FOR TABLE warm")
        spark = spark_session("walspark-cds")
        pipeline = lambda: Pipeline(spark, dsn=pg.dsn(), publication="warm_pub", slot="warm_slot",
                                    target=work + "/lake").on_progress(lambda line: None)
        pipeline().run_once()
        conn.execute("INSERT INTO warm SELECT g, 'n' || g, g, now() FROM generate_series(101, 120) g")
        conn.execute("UPDATE warm SET name = upper(name) WHERE id <= 30")
        conn.execute("DELETE FROM warm WHERE id > 110")
        pipeline().run_once()
        spark.read.format("delta").load(work + "/lake/public/warm").count()
        spark.stop()
        gateway = SparkContext._gateway
        conn.execute("SELECT pg_drop_replication_slot('warm_slot')")
    if gateway is not None:  # the JVM writes the archive as it exits: wait for it
        gateway.proc.stdin.close()
        gateway.proc.wait(timeout=600)
finally:
    shutil.rmtree(work, ignore_errors=True)
"""


def build(*, say=print) -> Path | None:
    """Make this environment's archive (about a minute); returns its path, None if it failed.

    A failure is not an error: walspark runs the same without the archive, only slower to start.
    """
    path = archive_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.unlink(tmp)  # the JVM creates it
    env = {**os.environ, CDS_ENV: tmp}
    try:
        done = subprocess.run([sys.executable, "-c", _WARM_UP], env=env, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        done = None
    if done is None or done.returncode != 0 or not os.path.isfile(tmp) or os.path.getsize(tmp) == 0:
        reason = "timed out" if done is None else (done.stderr.strip().splitlines() or ["no archive written"])[-1]
        say(f"the JVM class archive was not made ({reason}); Spark starts without it")
        if os.path.exists(tmp):
            os.unlink(tmp)
        return None
    os.replace(tmp, path)  # whole or not at all: a concurrent session maps the old one or none
    return path
