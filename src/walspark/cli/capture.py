"""``walspark capture`` (slot → capture file) and ``walspark decode`` (capture file → text).

Together they let anyone reproduce what a server sent: capture once, decode anywhere, attach
the file to a bug report.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any, Literal

import click

from walspark.cli.group import cli


@cli.command()
@click.option("--dsn", required=True, envvar="WALSPARK_DSN", help="libpq connection string of the source database.")
@click.option("--slot", required=True, help="An existing pgoutput slot.")
@click.option("--publication", "publications", required=True, multiple=True, help="Publication(s) to decode.")
@click.option("--proto-version", type=click.IntRange(1, 4), default=None, help="Default: the newest the server speaks.")
@click.option("--binary/--text", default=False, help="Tuple values in binary (pgoutput 'binary' option).")
@click.option("--messages/--no-messages", default=False, help="Include pg_logical_emit_message messages.")
@click.option(
    "--streaming", type=click.Choice(["off", "on", "parallel"]), default=None, help="Default: on from protocol 2."
)
@click.option("--two-phase/--no-two-phase", default=False)
@click.option("--upto-lsn", default=None, help="Stop at this LSN (X/Y).")
@click.option("--upto-nchanges", type=click.IntRange(1), default=None, help="Stop after about this many changes.")
@click.option("--consume", is_flag=True, help="Consume the changes (advance the slot); default is to peek.")
@click.argument("output", type=click.Path(dir_okay=False, path_type=Path))
def capture(
    dsn: str,
    slot: str,
    publications: tuple[str, ...],
    proto_version: int | None,
    binary: bool,
    messages: bool,
    streaming: Literal["off", "on", "parallel"] | None,
    two_phase: bool,
    upto_lsn: str | None,
    upto_nchanges: int | None,
    consume: bool,
    output: Path,
) -> None:
    """Read a slot's pgoutput messages through the SQL interface into a capture file.

    OUTPUT is a Parquet file (or Arrow IPC with an .arrow suffix) of (lsn, data) rows in
    stream order; the options used are stored in its metadata so `walspark decode` knows the
    protocol version. The slot is not advanced unless --consume is given.
    """
    from walspark.capture import CaptureInfo, write_capture
    from walspark.cli.errors import cli_errors
    from walspark.protocol import parse_lsn
    from walspark.source.connect import connect_sql
    from walspark.source.errors import OptionError
    from walspark.source.names import validate_publication_name, validate_slot_name
    from walspark.source.options import StreamOptions
    from walspark.source.sqlinterface import slot_changes

    with cli_errors(dsn):
        validate_slot_name(slot)
        for name in publications:
            validate_publication_name(name)
        try:
            upto = parse_lsn(upto_lsn) if upto_lsn else None
        except ValueError as exc:
            raise OptionError(f"--upto-lsn: {exc}") from None
        wanted = StreamOptions(
            publication_names=publications,
            proto_version=proto_version,
            binary=binary,
            messages=messages,
            streaming=streaming,
            two_phase=two_phase,
        )
        with connect_sql(dsn) as conn:
            server = conn.info.server_version
            options = dict(wanted.resolve(server).plugin_options())
            rows = slot_changes(conn, slot, options, upto_lsn=upto, upto_nchanges=upto_nchanges, consume=consume)
            count = write_capture(output, rows, CaptureInfo(options, server, slot))
    click.echo(f"captured {count} messages from slot {slot} into {output}", err=True)


@cli.command()
@click.argument("capture_file", metavar="CAPTURE", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["json", "text"]), default="json", show_default=True)
@click.option(
    "--proto-version",
    type=click.IntRange(1, 4),
    default=None,
    help="Override the capture's version (default: its metadata's, else 4, which reads every version).",
)
def decode(capture_file: Path, fmt: str, proto_version: int | None) -> None:
    """Print every message of a capture file, one per line.

    JSON (default): {"lsn": "X/Y", "type": "<Name>", ...fields in snake_case}; tuple values
    as text where pgoutput sent text, base64 where it sent binary. --format text is a
    compact human-readable dump.

    CAPTURE may come from any tool that saved the rows of pg_logical_slot_peek_binary_changes
    (lsn as a number or X/Y text, data as bytes): without walspark's metadata it is read as
    protocol 4, and a Stream Abort's length says whether it carries the parallel-streaming
    abort LSN and time.
    """
    from walspark.capture import CaptureError, CaptureFile
    from walspark.protocol import Decoder, ProtocolError, format_lsn

    try:
        source = CaptureFile(capture_file)
    except CaptureError as exc:
        raise click.ClickException(str(exc)) from exc
    version = proto_version or source.info.protocol_version
    # The long Stream Abort exists only at protocol 4: an override below it means the short one.
    decoder = Decoder(version, streaming_parallel=source.info.streaming_parallel if version >= 4 else False)
    out = sys.stdout
    try:
        for lsn, data in source:
            message = decoder.decode(data, lsn=lsn)
            if fmt == "json":
                out.write(json.dumps({"lsn": format_lsn(lsn), "type": type(message).__name__, **_fields(message)}))
            else:
                out.write(f"{format_lsn(lsn):>12} {_text_line(message)}")
            out.write("\n")
    except (ProtocolError, CaptureError) as exc:
        raise click.ClickException(str(exc)) from exc
    except BrokenPipeError:  # `walspark decode x | head` is fine
        sys.stderr.close()


def _fields(message: Any) -> dict[str, Any]:
    return {field.name: _jsonable(field.name, getattr(message, field.name)) for field in dataclasses.fields(message)}


def _jsonable(name: str, value: Any) -> Any:
    from walspark.protocol import TupleData, format_lsn

    if isinstance(value, TupleData):
        return [_tuple_column(kind, data) for kind, data in zip(value.kinds, value.values, strict=True)]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, int) and not isinstance(value, bool) and (name == "lsn" or name.endswith("_lsn")):
        return format_lsn(value)
    if isinstance(value, tuple):
        return [_fields(item) if dataclasses.is_dataclass(item) else item for item in value]
    return value


def _tuple_column(kind: str, data: bytes | None) -> dict[str, str]:
    if kind == "t" and data is not None:
        return {"kind": kind, "value": data.decode("utf-8", errors="backslashreplace")}
    if kind == "b" and data is not None:
        return {"kind": kind, "value": base64.b64encode(data).decode()}
    return {"kind": kind}


def _text_line(message: Any) -> str:
    parts = []
    for key, value in _fields(message).items():
        if isinstance(value, list) and value and isinstance(value[0], dict) and "kind" in value[0]:
            value = "(" + ", ".join(_show_column(column) for column in value) + ")"
        elif isinstance(value, list):
            value = "[" + ", ".join(_compact(item) for item in value) + "]"
        parts.append(f"{key}={value}")
    return f"{type(message).__name__:<16} " + " ".join(parts)


def _show_column(column: dict[str, str]) -> str:
    return {"n": "NULL", "u": "<unchanged>"}.get(column["kind"]) or (
        repr(column["value"]) if column["kind"] == "t" else f"b64:{column['value']}"
    )


def _compact(item: Any) -> str:
    if isinstance(item, dict):
        return " ".join(f"{k}={v}" for k, v in item.items())
    return str(item)
