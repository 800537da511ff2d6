"""Where a Spark session gets Delta Lake's jars (and hadoop-aws for ``s3a://``).

The first folder that has them, in the order docs/deploying.md ("spark-submit and pip") gives,
else Spark's package resolution once; when nothing is found, :class:`DeltaJarsNotFound` says
what to do, in one message.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: Environment variable naming a folder of jars (wins over the checkout's .jars/ and the cache).
JARS_ENV = "WALSPARK_JARS_DIR"

#: Delta Lake's jar version: ``delta.version`` in build-support/pom.xml (a test keeps them equal).
#: delta-spark 4.4.1 (the Python package) has no jar for Spark 4.2 on Maven Central; 4.4.0 is the
#: newest, with the same Python API.
DELTA_VERSION = "4.4.0"
SCALA_BINARY = "2.13"

#: The settings of Spark's package resolution a caller may pass on to it.
_RESOLVER_SETTINGS = ("spark.jars.ivy", "spark.jars.ivySettings", "spark.jars.repositories", "spark.jars.excludes")

#: The child process that runs Spark's package resolution. It only launches the JVM gateway
#: (spark-submit resolves ``spark.jars.packages`` before anything else) and prints the jars it
#: put on the class path; no SparkContext is started.
_RESOLVE_SCRIPT = """
import json, sys
from pyspark import SparkConf
from pyspark.java_gateway import launch_gateway
conf = SparkConf(loadDefaults=False)
for key, value in json.loads(sys.argv[1]).items():
    conf.set(key, value)
gateway = launch_gateway(conf)
print("WALSPARK-RESOLVED " + (gateway.jvm.System.getProperty("spark.jars") or ""), flush=True)
"""


class DeltaJarsNotFound(RuntimeError):
    """Spark cannot run Delta without its jars, and none were found or could be resolved."""


@dataclass(frozen=True, slots=True)
class Jars:
    """The jars a session gets, and where they came from (said by ``walspark jars``)."""

    folder: Path
    files: tuple[Path, ...]
    origin: str  # "WALSPARK_JARS_DIR", "checkout", "cache" or "resolved"


def spark_binary() -> str:
    """Spark's ``major.minor`` of the installed pyspark (Delta's artifact name carries it)."""
    import pyspark

    return ".".join(pyspark.__version__.split(".")[:2])


def hadoop_version() -> str:
    """The Hadoop client version pyspark ships (hadoop-aws must be the same)."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    for jar in sorted(jars.glob("hadoop-client-api-*.jar")):
        return jar.name.removeprefix("hadoop-client-api-").removesuffix(".jar")
    raise DeltaJarsNotFound(f"pyspark's Hadoop client jar not found in {jars}: is pyspark installed completely?")


def delta_package() -> str:
    return f"io.delta:delta-spark_{spark_binary()}_{SCALA_BINARY}:{DELTA_VERSION}"


def hadoop_aws_package() -> str:
    return f"org.apache.hadoop:hadoop-aws:{hadoop_version()}"


def cache_dir() -> Path:
    """This pyspark's and this Delta version's folder in the local cache (one per pair)."""
    import pyspark

    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "walspark" / "jars" / f"spark-{pyspark.__version__}-delta-{DELTA_VERSION}"


def checkout_dir() -> Path | None:
    """The checkout's ``.jars/`` when this walspark runs from a source checkout, else None."""
    root = Path(__file__).resolve().parents[3]
    return root / ".jars" if (root / "build-support" / "pom.xml").is_file() else None


def needs_s3a(locations: Iterable[str], conf: Mapping[str, str] | None = None) -> bool:
    """True when the session will use ``s3a://``: a location says so, or s3a settings are given."""
    return any(str(loc).startswith("s3a://") for loc in locations) or any(
        key.startswith("spark.hadoop.fs.s3a.") for key in (conf or {})
    )


#: Parts of the names of the jars only ``s3a://`` needs (Maven's and Spark's resolution's names):
#: hadoop-aws and what it pulls, the AWS SDK bundle (686 MB) among them.
_S3A_JARS = ("hadoop-aws-", "awssdk", "bundle-", "analyticsaccelerator-")


def is_s3a_jar(path: Path) -> bool:
    """A jar only ``s3a://`` needs: kept off a session that does not use it (its size)."""
    return any(part in path.name for part in _S3A_JARS)


def _has(files: Sequence[Path], s3a: bool) -> bool:
    """Delta's jar is there (Maven names it ``delta-spark_…``, Spark's resolution ``io.delta_delta-spark_…``)."""
    names = [f.name for f in files]
    delta = any("delta-spark_" in n for n in names)
    return delta and (not s3a or any("hadoop-aws-" in n for n in names))


def _jars_in(folder: Path) -> tuple[Path, ...]:
    return tuple(sorted(folder.glob("*.jar"))) if folder.is_dir() else ()


def find_jars(directory: str | os.PathLike[str] | None = None, *, s3a: bool = False) -> Jars | None:
    """The first folder of the lookup order (module docstring, 1-3) that has what is needed."""
    candidates: list[tuple[Path, str]] = []
    explicit = directory or os.environ.get(JARS_ENV)
    if explicit:
        candidates.append((Path(explicit), JARS_ENV))
    checkout = checkout_dir()
    if checkout is not None:
        candidates.append((checkout, "checkout"))
    candidates.append((cache_dir(), "cache"))
    for folder, origin in candidates:
        files = _jars_in(folder)
        if _has(files, s3a):
            return Jars(folder, files, origin)
    return None


def delta_jars(
    directory: str | os.PathLike[str] | None = None,
    *,
    s3a: bool = False,
    conf: Mapping[str, str] | None = None,
) -> Jars:
    """Delta's jars (and hadoop-aws when ``s3a``): found locally, else resolved into the cache."""
    found = find_jars(directory, s3a=s3a)
    if found is not None:
        return found
    packages = [delta_package()] + ([hadoop_aws_package()] if s3a else [])
    resolved = resolve_packages(packages, conf)
    folder = fill_cache(resolved)
    files = _jars_in(folder)
    if not _has(files, s3a):  # a resolution that "succeeded" without Delta: never start without it
        raise _not_found(
            packages, f"Spark's package resolution returned no Delta jar ({', '.join(map(str, resolved))})"
        )
    return Jars(folder, files, "resolved")


def resolve_packages(packages: Sequence[str], conf: Mapping[str, str] | None = None) -> list[Path]:
    """Run Spark's package resolution for ``packages`` in a child process; the jar files it got.

    A child process because a failed resolution ends the JVM gateway it runs in (PySpark can
    only say "Java gateway process exited"), and its Ivy report is kept in ``resolve.log``
    instead of flooding the terminal; the error quotes the lines that say what failed.
    """
    settings = {key: value for key, value in (conf or {}).items() if key in _RESOLVER_SETTINGS}
    settings["spark.jars.packages"] = ",".join(packages)
    log_path = cache_dir().parent / "resolve.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "PYSPARK_SUBMIT_ARGS")
    }
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    print(
        f"walspark: fetching {', '.join(packages)} with Spark's package resolution (once; then kept in {cache_dir()})",
        file=sys.stderr,
        flush=True,
    )
    with open(log_path, "w", encoding="utf-8") as log:
        done = subprocess.run(
            [sys.executable, "-c", _RESOLVE_SCRIPT, json.dumps(settings)],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            check=False,
        )
        log.write(done.stdout)
    marker = [line for line in done.stdout.splitlines() if line.startswith("WALSPARK-RESOLVED ")]
    if done.returncode != 0 or not marker:
        raise _not_found(packages, _reason(log_path.read_text(encoding="utf-8", errors="replace")), log_path)
    uris = [u for u in marker[-1].removeprefix("WALSPARK-RESOLVED ").split(",") if u]
    return [Path(u.removeprefix("file://").removeprefix("file:")) for u in uris]


def fill_cache(files: Iterable[Path], folder: Path | None = None) -> Path:
    """Copy jar files into the cache folder; each lands whole (copied aside, then renamed).

    Delta's and hadoop-aws's own jars are copied last: the lookup takes a folder that has them,
    so a copy cut short is never mistaken for a complete one.
    """
    folder = folder or cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    jars = [Path(f) for f in files if str(f).endswith(".jar")]
    for source in sorted(jars, key=lambda f: ("delta-spark_" in f.name or "hadoop-aws-" in f.name, f.name)):
        partial = folder / f".{source.name}.{os.getpid()}.part"
        shutil.copyfile(source, partial)
        os.replace(partial, folder / source.name)
    return folder


def _reason(log_text: str) -> str:
    """The lines of Spark's/Ivy's output that say why the resolution failed (at most three).

    Ivy's report is long; what to act on is which module was not found and why a repository
    could not be read (refused, unknown host, no such file).
    """
    keys = ("Server access error", "UnknownHost", "unresolved dependency", ": not found", "Exception")
    lines = [" ".join(line.strip(" :\t").split()) for line in log_text.splitlines()]
    picked = [line for key in keys for line in lines if key in line]
    return "; ".join(list(dict.fromkeys(picked))[:3]) or "the resolution ended without a result"


def _not_found(packages: Sequence[str], reason: str, log_path: Path | None = None) -> DeltaJarsNotFound:
    where = f" (full output: {log_path})" if log_path else ""
    return DeltaJarsNotFound(
        f"Delta Lake jars not found (not in ${JARS_ENV}, a checkout's .jars/ or the cache {cache_dir()}) "
        f"and Spark could not fetch {', '.join(packages)}: {reason}{where}; "
        f"run 'walspark jars' once with network access (it fills the cache), "
        f"or copy the jars into the cache with 'walspark jars --from FOLDER', "
        f"or set {JARS_ENV} to a folder holding them"
    )
