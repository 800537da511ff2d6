"""``walspark run`` with its Delta tables and all its own files on an S3 endpoint (moto's server).

Only the standard ``AWS_*`` environment variables are given (no ``--conf``): the Spark session
gets its s3a settings from them, and walspark's own files (snapshot record, checkpoint, staged
segments, notes) go to the same bucket. The run is a separate process, as a user starts it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

import walspark

from .support import assert_matches_publication

pytestmark = pytest.mark.spark

_SRC = str(Path(walspark.__file__).resolve().parents[1])


def _run_once(dsn: str, target: str, env: dict[str, str], cwd: Path) -> str:
    args = [sys.executable, "-m", "walspark.cli", "run", "--dsn", dsn, "--publication", "pub", "--slot", "s",
            "--target", target, "--once", "--master", "local[2]"]
    done = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    return output


def _spark_reads_bucket(spark, endpoint, bucket: str) -> None:  # type: ignore[no-untyped-def]
    """The suite's Spark session (started without s3a settings) reads this bucket: per-bucket keys."""
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    env = endpoint.env
    for key, value in {"endpoint": env["AWS_ENDPOINT_URL"], "endpoint.region": env["AWS_REGION"],
                       "access.key": env["AWS_ACCESS_KEY_ID"], "secret.key": env["AWS_SECRET_ACCESS_KEY"],
                       "path.style.access": "true", "connection.ssl.enabled": "false"}.items():
        conf.set(f"fs.s3a.bucket.{bucket}.{key}", value)


@pytest.mark.slow  # ~4-5 min here: every Delta commit and read is a series of S3 requests to moto
def test_run_keeps_tables_and_state_on_s3_with_aws_env_only(spark, pg18_dsn, s3_endpoint, tmp_path):
    bucket = s3_endpoint.bucket("lake")
    target = f"s3a://{bucket}/lake"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "WALSPARK_DSN"))}
    env.update(s3_endpoint.env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_SRC, os.environ.get("PYTHONPATH")) if p)
    env["WALSPARK_WAREHOUSE"] = str(tmp_path / "warehouse")
    _spark_reads_bucket(spark, s3_endpoint, bucket)
    with psycopg.connect(pg18_dsn, autocommit=True) as conn:
        conn.execute("""
            CREATE TABLE orders (id int PRIMARY KEY, customer text, amount numeric(12,2), placed timestamptz);
            CREATE TABLE events (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, kind text, body text);
            CREATE PUBLICATION pub FOR TABLE orders, events;
            INSERT INTO orders SELECT g, 'c' || (g % 7), g * 1.5, '2026-01-01'::timestamptz + g * interval '1 hour'
              FROM generate_series(1, 300) g;
            INSERT INTO events (kind, body) SELECT 'k' || (g % 3), 'n' || g FROM generate_series(1, 50) g;
        """)
        first = _run_once(pg18_dsn, target, env, tmp_path)
        assert_matches_publication(conn, spark, target, "pub", context="after the snapshot on S3")

        conn.execute("UPDATE orders SET amount = amount + 1 WHERE id % 5 = 0")
        conn.execute("DELETE FROM orders WHERE id > 280")
        with conn.transaction():
            conn.execute("INSERT INTO orders SELECT g, 'new', g, now() FROM generate_series(1000, 1999) g")
            conn.execute("INSERT INTO events (kind, body) SELECT 'big', repeat('x', 500) "
                         "FROM generate_series(1, 200)")
        conn.execute("UPDATE events SET kind = 'seen' WHERE id <= 10")
        second = _run_once(pg18_dsn, target, env, tmp_path)
        assert_matches_publication(conn, spark, target, "pub", context="after streaming on S3")

    keys = {o["Key"] for page in s3_endpoint.client().get_paginator("list_objects_v2").paginate(Bucket=bucket)
            for o in page.get("Contents", [])}
    for expected in ("lake/_walspark/snapshot.json", "lake/_walspark/staging/s/walspark-staging.json",
                     "lake/_walspark/checkpoints/s/commits/0"):
        assert expected in keys, sorted(keys)[:50]
    assert not (tmp_path / "lake").exists() and not list(tmp_path.glob("**/_walspark"))  # nothing on local disk
    for output in (first, second):
        assert s3_endpoint.env["AWS_SECRET_ACCESS_KEY"] not in output
