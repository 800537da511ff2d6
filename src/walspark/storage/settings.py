"""Where object-store credentials and endpoints come from: one place for every part of walspark.

The Spark session's ``spark.hadoop.fs.s3a.*`` settings, else the ``AWS_*`` variables; a secret
never appears in a ``repr``, a log line or an error message. See docs/design/storage.md.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

__all__ = ["HADOOP_KEYS", "StorageSettings", "current_settings", "spark_conf_from_env"]

_S3A = "fs.s3a."
#: StorageSettings field -> the Hadoop key (without ``spark.hadoop.``) that carries it.
HADOOP_KEYS = {
    "access_key": "fs.s3a.access.key",
    "secret_key": "fs.s3a.secret.key",
    "session_token": "fs.s3a.session.token",
    "endpoint": "fs.s3a.endpoint",
    "region": "fs.s3a.endpoint.region",
    "path_style": "fs.s3a.path.style.access",
    "ssl": "fs.s3a.connection.ssl.enabled",
}
_SECRET = frozenset({"secret_key", "session_token"})
_TRUE = ("true", "1", "yes")


@dataclass(frozen=True, slots=True)
class StorageSettings:
    """The object-store identity and endpoint (S3 today; GCS, Azure and HDFS use their own defaults).

    ``None`` everywhere means the library's defaults (its credential chain, AWS's endpoints).
    """

    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    endpoint: str | None = None
    region: str | None = None
    path_style: bool = False
    ssl: bool | None = None

    def __repr__(self) -> str:  # secrets shown as set or not, never their value
        shown = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or (value is False and f.name == "path_style"):
                continue
            shown.append(f"{f.name}={'<redacted>' if f.name in _SECRET else repr(value)}")
        return f"StorageSettings({', '.join(shown)})"

    __str__ = __repr__

    @classmethod
    def from_hadoop(cls, conf: Mapping[str, str]) -> StorageSettings:
        """From Hadoop keys (``fs.s3a.…``, with or without the ``spark.hadoop.`` prefix) alone."""
        plain = {k.removeprefix("spark.hadoop."): v for k, v in conf.items() if _S3A in k}
        got = {name: plain.get(key) or None for name, key in HADOOP_KEYS.items()}
        path_style = got.pop("path_style")
        ssl = got.pop("ssl")
        return cls(
            **got, path_style=(path_style or "").lower() in _TRUE, ssl=None if ssl is None else ssl.lower() in _TRUE
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> StorageSettings:
        """From ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
        ``AWS_REGION`` (or ``AWS_DEFAULT_REGION``) and ``AWS_ENDPOINT_URL`` (or its ``_S3`` form);
        path-style access when an endpoint is given (a local or private endpoint seldom serves
        bucket host names)."""
        env = os.environ if environ is None else environ
        endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None
        return cls(
            access_key=env.get("AWS_ACCESS_KEY_ID") or None,
            secret_key=env.get("AWS_SECRET_ACCESS_KEY") or None,
            session_token=env.get("AWS_SESSION_TOKEN") or None,
            endpoint=endpoint,
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None,
            path_style=endpoint is not None,
            ssl=None if endpoint is None else not endpoint.startswith("http://"),
        )

    @classmethod
    def resolve(
        cls, conf: Mapping[str, str] | None = None, environ: Mapping[str, str] | None = None
    ) -> StorageSettings:
        """The Hadoop settings in ``conf`` when they name credentials or an endpoint, else the environment's."""
        hadoop = cls.from_hadoop(conf or {})
        if hadoop.access_key or hadoop.endpoint:
            return hadoop
        env = cls.from_env(environ)
        return env if (env.access_key or env.endpoint) else hadoop

    def to_options(self) -> dict[str, str]:
        """The settings as Hadoop-named options (for the data source, read back with :meth:`from_hadoop`)."""
        out: dict[str, str] = {}
        for name, key in HADOOP_KEYS.items():
            value = getattr(self, name)
            if value is None or (name == "path_style" and not value):
                continue
            out[key] = str(value).lower() if isinstance(value, bool) else str(value)
        return out


def spark_conf_from_env(conf: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``spark.hadoop.fs.s3a.*`` settings the ``AWS_*`` environment variables give, for a
    session whose ``conf`` does not set them itself (explicit settings win, as a whole).

    Hadoop's s3a reads neither ``AWS_ENDPOINT_URL`` nor path-style from the environment, and a
    session token needs the temporary-credentials provider: without these keys Delta's writes
    would miss the endpoint the rest of walspark uses.
    """
    if any(k.startswith("spark.hadoop.fs.s3a.") for k in conf):
        return {}
    env = StorageSettings.from_env(environ)
    if not (env.access_key or env.endpoint):
        return {}
    out = {f"spark.hadoop.{k}": v for k, v in env.to_options().items()}
    if env.session_token:
        out["spark.hadoop.fs.s3a.aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
    return out


_by_session: dict[int, StorageSettings] = {}


def current_settings() -> StorageSettings:
    """The settings of this process's Spark session (driver side), else of the environment.

    Executors and the data source's Python workers have no session: they are handed the
    settings in options instead (see the module docstring).
    """
    sql = sys.modules.get("pyspark.sql")
    session = None
    if sql is not None:
        cls = sql.SparkSession
        session = getattr(cls, "_instantiatedSession", None)
        if session is None:
            try:
                session = cls.getActiveSession()
            except (AttributeError, RuntimeError, ImportError):  # no JVM in this process
                session = None
    if session is None:
        return StorageSettings.resolve({})
    key = id(session)
    if key not in _by_session:
        conf = {k: v for k, v in session.sparkContext.getConf().getAll() if _S3A in k}
        _by_session[key] = StorageSettings.resolve(conf)
    return _by_session[key]
