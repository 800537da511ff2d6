"""The Spark session walspark's CLI, tests and benchmarks run on.

Delta Lake's jars come from :mod:`walspark.spark.jars` (``$WALSPARK_JARS_DIR``, a checkout's
``.jars/``, the local cache, else Spark's package resolution once) and are handed to Spark with
``spark.jars``. Under ``spark-submit`` the session takes what spark-submit set up instead: its
master, its ``--packages``/``--jars`` and its ``--conf`` settings win over walspark's defaults.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from walspark.spark.jars import (
    JARS_ENV,
    DeltaJarsNotFound,
    delta_jars,
    delta_package,
    is_s3a_jar,
    needs_s3a,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

__all__ = ["JARS_ENV", "JIT_ENV", "START_UP_NOISE", "DeltaJarsNotFound", "MetastoreError", "PythonWorkersError",
           "check_python_workers", "jit_options", "launched_by_spark_submit", "metastore_settings", "spark_session"]  # fmt: skip

_LOG4J = Path(__file__).with_name("log4j2.properties")
_DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
#: Settings of the JVMs themselves: under spark-submit the driver's JVM already runs, and the
#: executors' options (our log4j file's path among them) belong to the cluster's set-up.
_JVM_SETTINGS = frozenset({"spark.driver.memory", "spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"})
#: What the driver JVM prints at every start, which nobody acts on: Java's note on the vector
#: module Spark's launcher always adds (no JVM option silences it), and Spark's advice on
#: ``sc.setLogLevel`` for a shell. Dropped from the JVM's stderr unless walspark logs at INFO
#: (``walspark -v``); every other line the JVM or a Python worker prints (an error, an
#: ``OutOfMemoryError``, a crash report) passes (:func:`_launch_gateway`).
START_UP_NOISE = re.compile(
    r"WARNING: Using incubator modules: |Using Spark's default log4j profile: |Setting default log level to "
    r"|To adjust logging level use sc\.setLogLevel"
)
#: How the driver JVM compiles: ``quick`` (C1 only), ``full`` (the JVM's tiered C1 then C2); unset,
#: quick for a short-lived session and full otherwise (:func:`jit_options`).
JIT_ENV = "WALSPARK_JIT"


def jit_options(short_lived: bool) -> str:
    """The driver JVM's compiler options: C1 alone for a short-lived session, unless ``$WALSPARK_JIT``
    says otherwise.

    Why: a fresh JVM's optimizing compiler (C2) spends its first minute compiling code that a short
    run executes a few times. In a ``walspark run --once`` applying 100 updates it took 28.6 of the
    JVM's 51 CPU-seconds; with C1 alone the run used a third less CPU and finished sooner
    (docs/design/fixed-costs.md). A stream runs the same plans all day, which repays C2's work.
    C1 alone shrinks the JVM's default code cache to 48 MB, which a ``--once`` run over a long
    backlog of batches and folds filled (the compiler then stops, and a method handle that needs
    the cache fails the run with ``InternalError``): the cache keeps tiered compilation's 240 MB.
    """
    setting = os.environ.get(JIT_ENV, "").strip().lower()
    if setting not in ("", "quick", "full"):
        log.warning("$%s is %r, neither 'quick' nor 'full': ignored", JIT_ENV, setting)
        setting = ""
    quick = setting == "quick" or (setting == "" and short_lived)
    return "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m" if quick else ""


#: Settings that configure a catalog of the user's own: with one of them in ``conf``, the session
#: keeps it and no embedded metastore is made (``spark.sql.catalog.<name>`` counts for a
#: ``--catalog-schema <name>.<schema>``).
_OWN_CATALOG = ("spark.sql.catalogImplementation", "spark.hadoop.hive.metastore.uris", "spark.sql.catalog.spark_catalog",
                "spark.sql.defaultCatalog")  # fmt: skip


class MetastoreError(ValueError):
    """The embedded metastore cannot be made where it was asked for (one line naming the fix)."""


def metastore_settings(folder: str, conf: Mapping[str, str] | None = None, schema: str = "") -> dict[str, str]:
    """The settings of a persistent catalog for ``--catalog-schema``: Spark's Hive catalog with an
    embedded Derby metastore in ``folder`` (``TargetLayout.metastore``), or nothing when ``conf``
    configures a catalog of its own (a real metastore by ``spark.hadoop.hive.metastore.uris``, which
    gets Hive support; Unity, Glue or any ``spark.sql.catalog.*`` named by ``schema``).

    Why Derby: pyspark ships it with Hive's client, so the tables' names outlive the session with
    nothing to install; it costs the first catalog call a few seconds (docs/applying.md, "Tables in
    the catalog"), paid only with the option. Raises :class:`MetastoreError` for a ``folder`` on an
    object store: Derby writes a local database.
    """
    conf = conf or {}
    head = schema.split(".")[0] if "." in schema else None
    if any(key in conf for key in _OWN_CATALOG) or (head and f"spark.sql.catalog.{head}" in conf):
        uris = "spark.hadoop.hive.metastore.uris" in conf and "spark.sql.catalogImplementation" not in conf
        return {"spark.sql.catalogImplementation": "hive"} if uris else {}
    local = _local_path(folder)
    if local is None:
        raise MetastoreError(
            f"--catalog-schema: the embedded Derby metastore cannot live in {folder} (an object store); give a "
            "real metastore (--conf spark.hadoop.hive.metastore.uris=thrift://HOST:9083) or a local --state folder"
        )
    return {
        "spark.sql.catalogImplementation": "hive",
        "spark.hadoop.javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={local}/metastore_db;create=true",
        "spark.sql.warehouse.dir": f"{local}/warehouse",
    }


def _local_path(folder: str) -> str | None:
    """``folder`` as a local path, or None when it is on an object store."""
    if folder.startswith("file:"):
        return "/" + folder[len("file:") :].lstrip("/")
    return None if "://" in folder else os.path.abspath(folder)


def _derby_home(settings: Mapping[str, str]) -> str:
    """The JVM option that keeps Derby's ``derby.log`` beside its database (not in the working folder)."""
    url = settings.get("spark.hadoop.javax.jdo.option.ConnectionURL", "")
    if not url.startswith("jdbc:derby:;databaseName="):
        return ""
    home = url[len("jdbc:derby:;databaseName=") :].split(";")[0].rsplit("/", 1)[0]
    Path(home).mkdir(parents=True, exist_ok=True)
    option = f"-Dderby.system.home={home}"
    return f'"{option}"' if any(c.isspace() for c in option) else option


def launched_by_spark_submit() -> bool:
    """True when this Python process is the driver of a ``spark-submit`` (its JVM is running).

    spark-submit starts the JVM first and then Python, handing it the gateway's port in
    ``PYSPARK_GATEWAY_PORT``; a plain ``python``/``walspark`` process has no JVM yet.
    """
    return "PYSPARK_GATEWAY_PORT" in os.environ


def spark_session(
    app_name: str = "walspark",
    *,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    jars_dir: str | os.PathLike[str] | None = None,
    locations: Sequence[str] = (),
    short_lived: bool = False,
    metastore: str | None = None,
    catalog_schema: str = "",
) -> SparkSession:
    """Get or create a Spark session with Delta Lake configured.

    The UI is off (nothing to look at on a CI machine, one port less to collide on), logs are
    quiet, the session time zone is UTC (the change rows' timestamps are UTC instants), and
    Python workers use this interpreter so they see the same packages as the driver.

    ``master`` defaults to ``local[*]``, except under spark-submit, whose ``--master`` stands
    unless ``master`` is given. ``locations`` are the paths the session will use: an ``s3a://``
    one (or ``spark.hadoop.fs.s3a.*`` settings in ``conf``) also puts hadoop-aws on the class
    path. ``conf`` wins over everything else. ``short_lived`` (a ``--once`` run, the demo) has the
    driver JVM, and a cluster's executors, compile with C1 alone (:func:`jit_options`).
    ``metastore`` (a folder; ``--catalog-schema`` ``catalog_schema``): the catalog keeps its tables
    there, in an embedded Hive metastore, unless ``conf`` configures one (:func:`metastore_settings`).
    """
    from pyspark.sql import SparkSession

    from walspark.spark.cds import java_options as cds_options

    java_opts = f"-Dlog4j2.configurationFile=file:{_LOG4J} -Dio.netty.tryReflectionSetAccessible=true"
    # Spark's classes mapped, not parsed (.cds, the driver's class path); C1 alone when the session is
    # short-lived, in the executors too (a cluster starts them for each application)
    jit = jit_options(short_lived)
    catalog = metastore_settings(metastore, conf, catalog_schema) if metastore is not None else {}
    driver_opts = " ".join(o for o in (java_opts, cds_options(), jit, _derby_home(catalog)) if o)
    settings = {
        "spark.app.name": app_name,
        "spark.sql.extensions": _DELTA_EXTENSION,
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "8",
        "spark.default.parallelism": "8",
        "spark.driver.memory": "2g",
        "spark.driver.extraJavaOptions": driver_opts,
        "spark.executor.extraJavaOptions": " ".join(o for o in (java_opts, jit) if o),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.databricks.delta.snapshotPartitions": "2",
        # Parquet's own microsecond timestamps, not Spark's legacy INT96 (nanoseconds in 96 bits):
        # every reader (delta-rs, DuckDB, Trino, pyarrow) reads them exactly, the ±infinity
        # sentinels (docs/types.md) included, where INT96 overflows in nanosecond readers.
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        # How long a Python process Spark starts (the pgoutput stream's source runner, a worker)
        # has to connect back to the JVM. Spark's 15 s ran out on a 2-core host busy with Spark
        # and PostgreSQL ("Python worker failed to connect back"), failing a healthy query.
        "spark.python.authenticate.socketTimeout": "120s",
        "spark.sql.warehouse.dir": os.environ.get("WALSPARK_WAREHOUSE", str(Path.cwd() / "spark-warehouse")),
        **catalog,
    }
    launching = not (launched_by_spark_submit() or _jvm_running())
    if not launching:
        # spark-submit's (or a notebook's running context's) --master, --packages/--jars and
        # --conf settings stand: only what they left unset gets walspark's default, and the
        # jars must already be on the class path.
        submitted = _submitted_settings()
        settings = {key: value for key, value in settings.items() if key not in submitted and key not in _JVM_SETTINGS}
    else:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # local mode: stay on loopback
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        settings["spark.master"] = "local[*]"
        s3a = needs_s3a(locations, conf)
        files = delta_jars(jars_dir, s3a=s3a, conf=conf).files
        settings["spark.jars"] = ",".join(str(jar) for jar in files if not is_s3a_jar(jar))
        _add_s3a_jars(settings, [jar for jar in files if is_s3a_jar(jar)] if s3a else [], master, conf or {})
    if master is not None:
        settings["spark.master"] = master
    class_path = settings.get("spark.driver.extraClassPath")  # conf's own entries are in it already
    settings.update(conf or {})
    if class_path:
        settings["spark.driver.extraClassPath"] = class_path
    from walspark.storage import spark_conf_from_env  # AWS_* variables reach Delta's s3a writes too

    settings.update(spark_conf_from_env(settings))
    if launching:
        _launch_gateway(settings)
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    # py4j logs a full traceback when a foreachBatch callback is interrupted by query.stop();
    # the streaming query reports the failure itself.
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    from walspark.spark import register  # the pgoutput data source

    register(spark)
    return spark


def _add_s3a_jars(settings: dict[str, str], jars: list[Path], master: str | None, conf: Mapping[str, str]) -> None:
    """hadoop-aws and the AWS SDK bundle (686 MB) onto the class paths, copied as seldom as possible.

    ``spark.jars`` would copy them into every executor's folder, at every start. In local mode
    the one JVM takes them on its class path as they are; on a cluster whose executors' class
    path already names hadoop-aws (Hadoop's cloud jars installed on the nodes, say) only the
    driver needs them; otherwise Spark ships them with ``spark.jars``.
    """
    if not jars:
        return
    path = os.pathsep.join(str(jar) for jar in jars)
    nodes = f"{conf.get('spark.executor.extraClassPath', '')} {os.environ.get('PYSPARK_SUBMIT_ARGS', '')}"
    if (master or "local").startswith("local") or "hadoop-aws" in nodes:
        driver = conf.get("spark.driver.extraClassPath")
        settings["spark.driver.extraClassPath"] = f"{driver}{os.pathsep}{path}" if driver else path
    else:
        settings["spark.jars"] += "," + ",".join(str(jar) for jar in jars)


def _launch_gateway(settings: Mapping[str, str]) -> None:
    """Start the driver JVM as ``getOrCreate()`` would with these ``settings``, its stderr (and
    its Python workers') copied to ours by a thread that drops :data:`START_UP_NOISE`. Nothing
    to do when this process already has a JVM (a stopped session's is reused)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    conf = SparkConf()
    for key, value in settings.items():
        conf.set(key, value)
    read_end, write_end = os.pipe()
    # started first: what a JVM that fails to start says reaches the user too
    threading.Thread(target=_copy_jvm_stderr, args=(read_end,), name="walspark-jvm-stderr", daemon=True).start()
    try:
        SparkContext._ensure_initialized(gateway=launch_gateway(conf, popen_kwargs={"stderr": write_end}))
    finally:
        os.close(write_end)  # the JVM holds its own copy; the thread ends when the JVM and its workers have


def _copy_jvm_stderr(read_end: int) -> None:
    """Copy the JVM's stderr lines to this process's, without :data:`START_UP_NOISE` unless logging at INFO."""
    with os.fdopen(read_end, "rb") as lines:
        for line in lines:
            if START_UP_NOISE.match(line.decode(errors="replace")) and not log.isEnabledFor(logging.INFO):
                continue
            try:
                os.write(2, line)
            except OSError:  # our stderr closed: keep draining, or the JVM would block on a full pipe
                pass


def _jvm_running() -> bool:
    """A SparkContext already runs in this process (a notebook's, a test's): its JVM is fixed."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


def _submitted_settings() -> dict[str, str]:
    """The settings spark-submit gave this driver's JVM; raises when Delta is not on its class path.

    The JVM is already running, so jars can no longer be added to the driver: a spark-submit
    without Delta's jars gets one error saying which ``--packages`` to add, instead of a
    ClassNotFoundException from deep inside the first Delta call.
    """
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # attaches to spark-submit's JVM gateway
    jvm = SparkContext._jvm
    assert jvm is not None
    if not jvm.org.apache.spark.util.Utils.classIsLoadable(_DELTA_EXTENSION):
        raise DeltaJarsNotFound(
            f"spark-submit was started without Delta Lake's jars; add --packages {delta_package()} "
            f"(or --jars with the delta-spark and delta-storage jars, e.g. those 'walspark jars' lists)"
        )
    return dict(SparkConf().getAll())


class PythonWorkersError(RuntimeError):
    """Spark's Python workers run an interpreter that cannot import walspark."""


def check_python_workers(spark: SparkSession) -> None:
    """Raise :class:`PythonWorkersError` (one line naming the setting) when a local session's
    Python workers run another interpreter than this one and it cannot import walspark.

    Why: PySpark starts its workers with ``$PYSPARK_PYTHON`` (default: ``python3`` on the PATH),
    which in a notebook is often not the kernel's virtual environment; the data source's first
    task would then fail deep inside Spark with ``ModuleNotFoundError: No module named
    'walspark'``. A cluster's workers are set up by its deployment (docs/deploying.md).
    """
    import shutil
    import subprocess

    sc = spark.sparkContext
    if not str(sc.master).startswith("local"):
        return
    chosen = sc.pythonExec  # $PYSPARK_PYTHON when the context was made: every Python function's interpreter
    resolved = shutil.which(chosen) or chosen
    if os.path.abspath(resolved) == os.path.abspath(sys.executable):
        return  # (not realpath: a virtual environment's python links to an interpreter without its packages)
    try:
        ok = subprocess.run([resolved, "-c", "import walspark"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if not ok:
        raise PythonWorkersError(
            f"Spark's Python workers run {chosen} ({resolved}), which cannot import walspark; set "
            f"os.environ['PYSPARK_PYTHON'] = {sys.executable!r} (or export PYSPARK_PYTHON={sys.executable}) before "
            "the first SparkSession of this process, or let walspark.spark.session.spark_session() make it"
        )
