"""Unit tests of walspark.source without a server: names, quoting, DSN redaction, options,
backoff, error classification and the idle-confirm rule."""

from __future__ import annotations

import random

import pytest

from walspark.source import (
    InvalidName,
    OptionError,
    ReconnectPolicy,
    ReplicationStream,
    StreamOptions,
    max_protocol_version,
    redact_dsn,
    redact_secrets,
    validate_publication_name,
    validate_slot_name,
)
from walspark.source.connect import classify_error
from walspark.source.errors import (
    AuthenticationFailed,
    ConnectionLost,
    DatabaseNotFound,
    PermissionDenied,
    PublicationNotFound,
    SlotInUse,
    SlotInvalidated,
    SlotNotFound,
    WalLevelNotLogical,
)
from walspark.source.names import publication_names_value, quote_repl_ident, quote_repl_literal
from walspark.source.options import start_replication_command
from walspark.source.slots import create_slot_command

# ----------------------------------------------------------------------------- names


@pytest.mark.parametrize("name", ["a", "slot_1", "x" * 63, "0abc"])
def test_valid_slot_names(name: str) -> None:
    assert validate_slot_name(name) == name


@pytest.mark.parametrize("name", ["", "A", "has-dash", "sp ace", "x" * 64, 'q"', "é", "a\x00"])
def test_invalid_slot_names(name: str) -> None:
    with pytest.raises(InvalidName):
        validate_slot_name(name)


@pytest.mark.parametrize("name", ["pub", 'we"ird pub', "ünïcødé", "x" * 63, "with,comma", "O'Brien"])
def test_valid_publication_names(name: str) -> None:
    assert validate_publication_name(name) == name


def test_invalid_publication_names() -> None:
    for bad in ("", "a\x00b", "x" * 64, "é" * 32):  # 32 x 2 bytes = 64 bytes
        with pytest.raises(InvalidName):
            validate_publication_name(bad)


def test_replication_quoting() -> None:
    assert quote_repl_ident('a"b') == '"a""b"'
    assert quote_repl_literal("it's \\n") == "'it''s \\n'"
    assert publication_names_value(['a"b', "c,d", "O'x"]) == '"a""b","c,d","O\'x"'
    with pytest.raises(InvalidName):
        publication_names_value([])


# ----------------------------------------------------------------------------- DSN redaction

SECRET = "s3cr3t-P@ss"


@pytest.mark.parametrize(
    "dsn",
    [
        f"host=db user=app password={SECRET} sslmode=require",
        f"host=db password = '{SECRET} with space' dbname=x",
        "host=db password='it\\'s s3cr3t' dbname=x",
        f"postgresql://app:{SECRET.replace('@', '%40')}@db:5432/shop?sslmode=require",
        f"postgres://app@db/shop?password={SECRET.replace('@', '%40')}&sslmode=verify-full",
        f"host=db sslpassword={SECRET} password={SECRET}",
        f"host=db password='{SECRET}",  # unterminated quote: malformed, still redacted
    ],
)
def test_redact_dsn_hides_password(dsn: str) -> None:
    red = redact_dsn(dsn)
    assert "s3cr3t" not in red
    assert "***" in red
    assert "db" in red  # the rest stays readable
    if "sslmode" in dsn:
        assert "sslmode=" in red


def test_redact_keeps_passwordless_dsn() -> None:
    assert redact_dsn("host=db user=app dbname=x") == "host=db user=app dbname=x"
    assert redact_dsn("postgresql://app@db/x") == "postgresql://app@db/x"


def test_redact_secrets_in_free_text() -> None:
    dsn = f"host=db password={SECRET}"
    text = f"could not connect with {SECRET}; conninfo 'password={SECRET}'"
    out = redact_secrets(text, dsn)
    assert SECRET not in out and "s3cr3t" not in out


# ----------------------------------------------------------------------------- options


@pytest.mark.parametrize(("version", "proto"), [(180001, 4), (160004, 4), (150012, 3), (140010, 2), (130000, 1),
                                                 (100023, 1)])
def test_negotiated_protocol(version: int, proto: int) -> None:
    assert max_protocol_version(version) == proto
    resolved = StreamOptions(("p",)).resolve(version)
    assert resolved.proto_version == proto
    assert resolved.streaming == ("on" if proto >= 2 else "off")


def test_option_values_per_version() -> None:
    opts = StreamOptions(("p",), streaming="parallel", two_phase=True, origin="none", binary=True, messages=True)
    assert dict(opts.resolve(180000).plugin_options()) == {
        "proto_version": "4", "publication_names": '"p"', "binary": "true", "messages": "true",
        "streaming": "parallel", "two_phase": "true", "origin": "none",
    }
    v15 = dict(StreamOptions(("p",), two_phase=True).resolve(150000).plugin_options())
    assert v15["proto_version"] == "3" and v15["streaming"] == "true" and v15["two_phase"] == "true"
    assert "origin" not in v15
    v13 = dict(StreamOptions(("p",)).resolve(130000).plugin_options())
    assert v13 == {"proto_version": "1", "publication_names": '"p"'}


@pytest.mark.parametrize(
    ("opts", "version", "needle"),
    [
        (StreamOptions(("p",), streaming="parallel"), 150000, "parallel"),
        (StreamOptions(("p",), streaming="parallel", proto_version=3), 180000, "parallel"),
        (StreamOptions(("p",), two_phase=True, proto_version=2), 180000, "two_phase"),
        (StreamOptions(("p",), two_phase=True), 140000, "two_phase"),
        (StreamOptions(("p",), origin="none"), 150000, "origin"),
        (StreamOptions(("p",), streaming="on"), 130000, "streaming"),
        (StreamOptions(("p",), proto_version=4), 150000, "proto_version 4"),
        (StreamOptions(("p",), binary=True), 130000, "binary"),
        (StreamOptions(("p",)), 90600, "not supported"),
    ],
)
def test_invalid_option_combinations(opts: StreamOptions, version: int, needle: str) -> None:
    with pytest.raises(OptionError, match=needle):
        opts.resolve(version)


def test_option_validation_at_construction() -> None:
    with pytest.raises(OptionError):
        StreamOptions(())
    with pytest.raises(OptionError):
        StreamOptions(("p",), streaming="sometimes")  # type: ignore[arg-type]
    with pytest.raises(OptionError):
        StreamOptions(("p",), origin="all")  # type: ignore[arg-type]
    with pytest.raises(InvalidName):
        StreamOptions(("a\x00",))
    assert StreamOptions("p").publication_names == ("p",)  # type: ignore[arg-type]
    assert StreamOptions(("p",), streaming=True).streaming == "on"


def test_start_replication_command_quotes_everything() -> None:
    resolved = StreamOptions(('we"ird pub', "O'Brien"), binary=True).resolve(180000)
    cmd = start_replication_command("s1", 0x1_0000_00AB, resolved)
    assert cmd.startswith('START_REPLICATION SLOT "s1" LOGICAL 1/AB (proto_version \'4\', ')
    assert "publication_names '\"we\"\"ird pub\",\"O''Brien\"'" in cmd


def test_create_slot_command_syntax_per_version() -> None:
    assert create_slot_command("s", server_version_num=180000, temporary=True, two_phase=True) == \
        "CREATE_REPLICATION_SLOT \"s\" TEMPORARY LOGICAL pgoutput (SNAPSHOT 'export', TWO_PHASE)"
    assert create_slot_command("s", server_version_num=150000, snapshot="nothing") == \
        "CREATE_REPLICATION_SLOT \"s\" LOGICAL pgoutput (SNAPSHOT 'nothing')"
    assert create_slot_command("s", server_version_num=140000, two_phase=True) == \
        'CREATE_REPLICATION_SLOT "s" LOGICAL pgoutput EXPORT_SNAPSHOT TWO_PHASE'
    assert create_slot_command("s", server_version_num=130000, snapshot="use") == \
        'CREATE_REPLICATION_SLOT "s" LOGICAL pgoutput USE_SNAPSHOT'
    with pytest.raises(OptionError):
        create_slot_command("s", server_version_num=130000, two_phase=True)
    # a failover slot where the server has them (17+); older servers, and temporary slots, have none
    assert create_slot_command("s", server_version_num=180000, failover=True) == \
        "CREATE_REPLICATION_SLOT \"s\" LOGICAL pgoutput (SNAPSHOT 'export', FAILOVER)"
    assert create_slot_command("s", server_version_num=160000, failover=True) == \
        "CREATE_REPLICATION_SLOT \"s\" LOGICAL pgoutput (SNAPSHOT 'export')"
    assert "FAILOVER" not in create_slot_command("s", server_version_num=180000, temporary=True, failover=True)


# ----------------------------------------------------------------------------- backoff


def test_backoff_is_exponential_jittered_and_bounded() -> None:
    policy = ReconnectPolicy(max_attempts=6, initial_delay=1.0, max_delay=8.0, multiplier=2.0, jitter=0.5)
    delays = list(policy.delays(random.Random(7)))
    assert len(delays) == 6
    for n, d in enumerate(delays):
        base = min(8.0, 2.0**n)
        assert base * 0.5 <= d <= base
    assert list(ReconnectPolicy(max_attempts=3, jitter=0).delays()) == [0.5, 1.0, 2.0]
    with pytest.raises(ValueError):
        ReconnectPolicy(max_attempts=None, max_elapsed=None)


# ----------------------------------------------------------------------------- classification


@pytest.mark.parametrize(
    ("sqlstate", "text", "cls", "retryable"),
    [
        ("42704", 'replication slot "s" does not exist', SlotNotFound, False),
        ("42704", 'publication "p" does not exist', PublicationNotFound, False),
        ("55000", 'can no longer get changes from replication slot "s"', SlotInvalidated, False),
        ("55000", "logical decoding requires \"wal_level\" >= \"logical\"", WalLevelNotLogical, False),
        ("55006", 'replication slot "s" is active for PID 42', SlotInUse, True),
        ("42501", "permission denied to start WAL sender", PermissionDenied, False),
        (None, 'FATAL: password authentication failed for user "x"', AuthenticationFailed, False),
        (None, 'FATAL: database "nope" does not exist', DatabaseNotFound, False),
        ("57P01", "terminating connection due to administrator command", ConnectionLost, True),
        (None, "server closed the connection unexpectedly", ConnectionLost, True),
        ("57P03", "the database system is starting up", ConnectionLost, True),
    ],
)
def test_classify_error(sqlstate: str | None, text: str, cls: type, retryable: bool) -> None:
    err = classify_error(sqlstate, text, dsn=f"host=h password={SECRET}")
    assert isinstance(err, cls)
    assert err.retryable is retryable
    assert SECRET not in str(err) and "\n" not in str(err)


# ----------------------------------------------------------------------------- idle confirm rule


def _stream() -> ReplicationStream:
    return ReplicationStream("host=nowhere", "s1", StreamOptions(("p",)), heartbeat=False)


def _begin(xid: int) -> bytes:
    return b"B" + (0).to_bytes(8, "big") * 2 + xid.to_bytes(4, "big")


def test_idle_confirm_only_when_nothing_pending() -> None:
    st = _stream()
    # nothing received yet: a keepalive position may be reported
    st._on_keepalive(100)
    assert st.flushed_lsn == 100
    # a transaction arrives (Begin at 90, i.e. below what we reported) and ends with Commit at 200
    st._track(90, _begin(7))
    st._on_keepalive(150)
    assert st.flushed_lsn == 100, "open transaction: must not advance"
    st._track(200, b"C")
    st._on_keepalive(250)
    assert st.flushed_lsn == 100, "commit received but not confirmed: must not advance"
    st.confirm(200)
    assert st.flushed_lsn == 200
    st._on_keepalive(300)
    assert st.flushed_lsn == 300, "everything confirmed: idle position reported"


def test_psycopg2_pitfall_is_not_reproduced() -> None:
    """psycopg2 advances when confirmed >= start LSN of the *last* message; we do not.

    Transaction B commits (end 500) after A began (first LSN 400): the stream delivers B then
    A's Begin with data_start 400. Confirming B (500 >= 400) must not let a keepalive move the
    flush position while A is open.
    """
    st = _stream()
    st._track(500, b"C")
    st._track(400, _begin(8))
    st.confirm(500)
    st._on_keepalive(700)
    assert st.flushed_lsn == 500


def test_idle_confirm_waits_for_streamed_transactions() -> None:
    st = _stream()
    xid = (77).to_bytes(4, "big")
    st._track(100, b"S" + xid + b"\x01")
    st._track(110, b"E")
    st._on_keepalive(200)
    assert st.flushed_lsn == 0
    st._track(300, b"A" + xid + (78).to_bytes(4, "big"))  # subtransaction abort: still open
    st._on_keepalive(310)
    assert st.flushed_lsn == 0
    st._track(320, b"c" + xid + b"\x00" + (1).to_bytes(8, "big") * 3)
    st.confirm(320)
    st._on_keepalive(400)
    assert st.flushed_lsn == 400


def test_idle_confirm_can_be_disabled_and_confirm_is_checked() -> None:
    st = ReplicationStream("host=nowhere", "s1", StreamOptions(("p",)), heartbeat=False, idle_confirm=False)
    st._on_keepalive(100)
    assert st.flushed_lsn == 0
    st._track(50, b"C")
    with pytest.raises(ValueError, match="only received"):
        st.confirm(60)
    st.confirm(50)
    st.confirm(10)  # lower: ignored
    assert st.confirmed_lsn == 50 == st.flushed_lsn


def test_redacting_a_redacted_message_keeps_its_punctuation() -> None:
    """Messages are redacted at each layer; a second pass must not eat ``);`` after ``***``."""
    dsn = "host=db password=Sekr3t user=app"
    once = redact_secrets("cannot connect: refused (host=db password=Sekr3t user=app); check the host", dsn)
    assert once == "cannot connect: refused (host=db password=*** user=app); check the host"
    tail = redact_secrets("failed (host=db password=***); check the host", dsn)
    assert tail == "failed (host=db password=***); check the host"
    assert redact_secrets("password=***x", None) == "password=***"  # not a mask: still masked


def test_two_phase_auto_is_on_where_the_protocol_has_it():
    auto = StreamOptions(("p",), two_phase=None)
    assert auto.resolve(180000).two_phase and auto.resolve(150000).two_phase
    assert dict(auto.resolve(150000).plugin_options())["two_phase"] == "true"
    assert not auto.resolve(140000).two_phase and "two_phase" not in dict(auto.resolve(140000).plugin_options())
    assert not StreamOptions(("p",), two_phase=None, proto_version=2).resolve(180000).two_phase
    assert not StreamOptions(("p",)).resolve(180000).two_phase  # the default stays off


def test_the_spark_source_asks_for_two_phase_on_streams_not_on_peeks():
    from walspark.spark.datasource.options import SourceOptions

    base = {"dsn": "dbname=x", "slot": "s", "publication": "p"}
    assert SourceOptions.parse({**base, "stagingPath": "/tmp/x"}).stream_options().two_phase is None
    assert SourceOptions.parse({**base, "peek": "true"}).stream_options().two_phase is False
    assert SourceOptions.parse({**base, "twoPhase": "false"}).stream_options().two_phase is False
    assert SourceOptions.parse({**base, "peek": "true", "twoPhase": "true"}).stream_options().two_phase is True
