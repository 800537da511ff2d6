"""A run's Prometheus metrics at ``/metrics`` (``--metrics-port``), read from its tracker at each scrape."""

from __future__ import annotations

import errno
import logging
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, StateSetMetricFamily
from prometheus_client.registry import Collector

from walspark.pipeline.status import PHASES

if TYPE_CHECKING:
    from walspark.pipeline.settings import RunSettings
    from walspark.pipeline.status import Tracker

__all__ = ["BATCH_SECONDS_BUCKETS", "RunMetrics", "check_metrics_port", "serve_metrics"]

log = logging.getLogger(__name__)

#: The histogram's buckets of a batch's duration: a small batch takes about a second, a backlog's
#: batches minutes.
BATCH_SECONDS_BUCKETS = (0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)

#: The ``op`` label of a change row's operation.
_OPERATIONS = {"I": "insert", "U": "update", "D": "delete", "T": "truncate"}


class RunMetrics(Collector):
    """One run's metrics in a registry of its own (several pipelines in one process never clash).

    Every value but the batch durations is read from the :class:`Tracker`'s status when scraped,
    the same facts the progress lines and :meth:`PipelineHandle.status` report; the durations
    are the ones the progress lines say, observed as they are said.
    """

    def __init__(self, tracker: Tracker, slot: str, copying: Callable[[], tuple[str, ...]] = tuple) -> None:
        self.tracker, self.slot, self.copying = tracker, slot, copying
        self.registry = CollectorRegistry(auto_describe=False)
        durations = Histogram("walspark_batch_duration_seconds", "Seconds each micro-batch took, as its progress "
                              "line says.", ["slot"], registry=self.registry, buckets=BATCH_SECONDS_BUCKETS)  # fmt: skip
        tracker.on_batch_took(durations.labels(slot).observe)
        self.registry.register(self)

    def describe(self) -> list[Metric]:
        return []  # read at each scrape; nothing to collect at registration

    def collect(self) -> Iterator[Metric]:
        status = self.tracker.status(self.copying())
        slot = [self.slot]
        state = StateSetMetricFamily("walspark_state", "The pipeline's phase (1: the current one).", labels=["slot"])
        state.add_metric(slot, {phase: phase == status.state for phase in PHASES})
        yield state
        batches = CounterMetricFamily("walspark_batches", "Micro-batches applied.", labels=["slot"])
        batches.add_metric(slot, status.batches)
        yield batches
        changes = CounterMetricFamily("walspark_changes_applied", "Change rows applied, by table and operation "
                                      "(insert, update, delete, truncate).", labels=["slot", "table", "op"])  # fmt: skip
        for table, ops in sorted(status.changes.items()):
            for op, n in sorted(ops.items()):
                changes.add_metric([self.slot, table, _OPERATIONS.get(op, op)], n)
        yield changes
        starts = CounterMetricFamily("walspark_query_starts", "Streaming queries started (a schema change "
                                     "restarts the query).", labels=["slot"])  # fmt: skip
        starts.add_metric(slot, status.query_starts)
        yield starts
        errors = CounterMetricFamily("walspark_errors", "Errors the run met, by kind (the exception's class), "
                                     "the one that failed it and the ones it got past.", labels=["slot", "kind"])  # fmt: skip
        for kind, n in sorted(status.errors.items()):
            errors.add_metric([self.slot, kind], n)
        yield errors
        for name, text, value in (
            ("walspark_lag_seconds", "Seconds the last batch applied was behind its source commit (0: up to "
             "date).", status.lag_seconds),
            ("walspark_slot_lag_bytes", "Bytes of WAL between the server's position and the last batch applied "
             "(or, while idle, the slot's confirmed position).", status.slot_lag_bytes),
            ("walspark_slot_retained_wal_bytes", "Bytes of WAL the server retains for the slot (from its "
             "restart_lsn).", status.slot_retained_bytes),
            ("walspark_last_batch_timestamp_seconds", "When the last batch was applied (Unix time).",
             status.last_batch_at),
            ("walspark_start_time_seconds", "When the run started (Unix time).", status.started_at),
            ("walspark_tables_copying", "Tables being copied beside the stream (joined the publication, or "
             "re-copied).", len(status.tables_copying)),
        ):  # fmt: skip
            gauge = GaugeMetricFamily(name, text, labels=["slot"])
            if value is not None:  # not known yet: no sample rather than a made-up value
                gauge.add_metric(slot, value)
            yield gauge
        copying = GaugeMetricFamily(
            "walspark_table_copying", "1 for each table being copied.", labels=["slot", "table"]
        )
        for table in status.tables_copying:
            copying.add_metric([self.slot, table], 1)
        yield copying


def _unavailable(settings: RunSettings, exc: OSError) -> Exception:
    """The one line saying why the metrics cannot be served where asked, and what to do."""
    from walspark.source.errors import OptionError

    port, host = settings.metrics_port, settings.metrics_host
    if exc.errno == errno.EADDRINUSE:
        return OptionError(f"--metrics-port {port} is in use on {host}; choose another port or stop what holds it")
    if exc.errno == errno.EACCES:
        return OptionError(f"--metrics-port {port}: this user may not listen on it on {host} (a port below 1024 "
                           "needs privileges); choose a port above 1023")  # fmt: skip
    if exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
        return OptionError(f"--metrics-host {host} is not an address of this host; give one of its addresses, or "
                           "0.0.0.0 for every interface")  # fmt: skip
    reason = " ".join(str(exc).split())
    return OptionError(f"--metrics-port {port} cannot be served on {host} ({reason}); choose another port or host")


def check_metrics_port(settings: RunSettings) -> None:
    """The metrics' port can be listened on (nothing else holds it), asked before Spark starts:
    raises :class:`walspark.source.errors.OptionError` in one line otherwise."""
    if settings.metrics_port is None:
        return
    try:
        family, kind, _, _, address = socket.getaddrinfo(settings.metrics_host, settings.metrics_port,
                                                         type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]  # fmt: skip
        with socket.socket(family, kind) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server will: TIME_WAIT is no holder
            probe.bind(address)
            probe.listen()
    except OSError as exc:
        raise _unavailable(settings, exc) from None


@contextmanager
def serve_metrics(settings: RunSettings, tracker: Tracker,
                  copying: Callable[[], tuple[str, ...]] = tuple) -> Iterator[RunMetrics | None]:  # fmt: skip
    """Serve the run's metrics at ``http://HOST:PORT/metrics`` while the ``with`` block runs
    (nothing without ``settings.metrics_port``); the server is shut down and its port freed at
    the end, so the next run of this process can serve on it again."""
    if settings.metrics_port is None:
        yield None
        return
    metrics = RunMetrics(tracker, settings.slot, copying)
    try:
        server, thread = start_http_server(settings.metrics_port, settings.metrics_host, registry=metrics.registry)
    except OSError as exc:
        raise _unavailable(settings, exc) from None
    log.info("serving metrics at http://%s:%s/metrics", settings.metrics_host, settings.metrics_port)
    try:
        yield metrics
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
