"""The local Spark session walspark's CLI, tests and benchmarks run on.

Delta Lake's jars are fetched once at set-up (``./dev setup``: Maven Central → ``.jars/``) and
handed to Spark with ``spark.jars``, so no session ever resolves packages over the network.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Environment variable naming the folder with Delta's jars (overrides the checkout's .jars/).
JARS_ENV = "WALSPARK_JARS_DIR"

_LOG4J = Path(__file__).with_name("log4j2.properties")


class DeltaJarsNotFound(RuntimeError):
    """Spark cannot run Delta without its jars, and walspark never downloads at run time."""


def delta_jars(directory: str | os.PathLike[str] | None = None) -> list[Path]:
    """The Delta Lake jars to put on Spark's class path.

    Looked up in ``directory``, else ``$WALSPARK_JARS_DIR``, else the checkout's ``.jars/``.
    """
    candidates = [Path(p) for p in (directory, os.environ.get(JARS_ENV)) if p]
    candidates.append(Path(__file__).resolve().parents[3] / ".jars")
    for folder in candidates:
        jars = sorted(folder.glob("*.jar")) if folder.is_dir() else []
        if any(jar.name.startswith("delta-spark_") for jar in jars):
            return jars
    searched = ", ".join(str(c) for c in candidates)
    raise DeltaJarsNotFound(
        f"Delta Lake jars not found (looked in {searched}); run ./dev setup once, "
        f"or set {JARS_ENV} to a folder holding delta-spark and delta-storage jars"
    )


def spark_session(
    app_name: str = "walspark",
    *,
    master: str = "local[*]",
    conf: Mapping[str, str] | None = None,
    jars_dir: str | os.PathLike[str] | None = None,
) -> SparkSession:
    """Get or create a Spark session with Delta Lake configured from the local jars.

    The UI is off (nothing to look at on a CI machine, one port less to collide on), logs are
    quiet, the session time zone is UTC (the change rows' timestamps are UTC instants), and
    Python workers use this interpreter so they see the same packages as the driver.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # local mode: stay on loopback
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    java_opts = f"-Dlog4j2.configurationFile=file:{_LOG4J} -Dio.netty.tryReflectionSetAccessible=true"
    settings = {
        "spark.master": master,
        "spark.app.name": app_name,
        "spark.jars": ",".join(str(jar) for jar in delta_jars(jars_dir)),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "8",
        "spark.default.parallelism": "8",
        "spark.driver.memory": "2g",
        "spark.driver.extraJavaOptions": java_opts,
        "spark.executor.extraJavaOptions": java_opts,
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.sql.warehouse.dir": os.environ.get("WALSPARK_WAREHOUSE", str(Path.cwd() / "spark-warehouse")),
        **(conf or {}),
    }
    from walspark.storage import spark_conf_from_env  # AWS_* variables reach Delta's s3a writes too

    settings.update(spark_conf_from_env(settings))
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
