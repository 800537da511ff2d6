"""Connection strings: password redaction, and the few parameters walspark adds.

See docs/design/source.md.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

__all__ = ["SECRET_KEYS", "dsn_params", "is_uri", "redact_dsn", "redact_secrets", "with_defaults"]

#: Connection parameters whose value is a secret.
SECRET_KEYS = frozenset({"password", "sslpassword"})
_MASK = "***"

_URI_RE = re.compile(r"^\s*postgres(?:ql)?://", re.IGNORECASE)
# key = value, where value is '...' (backslash escapes, possibly unterminated) or a bare word.
# A quoted value swallows any non-space text glued to its closing quote: in a malformed DSN
# (``password='a\\'b'``) the tail may be part of what the user meant as the password.
_KV_RE = re.compile(
    r"""(?P<key>[A-Za-z_][A-Za-z0-9_]*)(?P<eq>\s*=\s*)(?P<val>'(?:[^'\\]|\\.)*'?\S*|(?:[^\s\\]|\\.)*)"""
)
# user:password@ in the authority part of a URI (libpq: userinfo ends at the first '@' before '/').
_URI_USERINFO_RE = re.compile(r"(?P<pre>postgres(?:ql)?://[^:@/?]*):(?P<val>[^@/]*)@", re.IGNORECASE)
# A value masked earlier, with the punctuation of the message around it (``(... password=***);``):
# masking it again would swallow that punctuation, as a bare value runs to the next space.
_ALREADY_MASKED = re.compile(r"\*\*\*[)\];,.:'\"]*")
_URI_PARAM_RE = re.compile(r"(?P<pre>[?&](?P<key>[A-Za-z_]+)=)(?P<val>[^&#\s]*)")


def is_uri(dsn: str) -> bool:
    """True for the ``postgresql://`` / ``postgres://`` form."""
    return bool(_URI_RE.match(dsn))


def _kv_unquote(raw: str) -> str:
    if raw.startswith("'"):
        raw = raw[1:-1] if len(raw) >= 2 and raw.endswith("'") else raw[1:]
    return re.sub(r"\\(.)", r"\1", raw)


def _secrets_in(dsn: str) -> list[str]:
    """Every secret value of ``dsn``, in each spelling it may appear in (raw, unquoted, decoded)."""
    found: list[str] = []
    for match in _URI_USERINFO_RE.finditer(dsn):
        found += [match["val"], unquote(match["val"])]
    for match in _URI_PARAM_RE.finditer(dsn):
        if match["key"].lower() in SECRET_KEYS:
            found += [match["val"], unquote(match["val"])]
    if not is_uri(dsn):
        for match in _KV_RE.finditer(dsn):
            if match["key"].lower() in SECRET_KEYS:
                found += [match["val"], _kv_unquote(match["val"])]
    return [s for s in dict.fromkeys(found) if s]


def redact_dsn(dsn: str) -> str:
    """``dsn`` with every password replaced by ``***``; everything else kept as written.

    >>> redact_dsn("host=db user=app password='s e\\\\'cret' sslmode=require")
    'host=db user=app password=*** sslmode=require'
    >>> redact_dsn("postgresql://app:s%40cret@db:5432/shop?sslmode=require")
    'postgresql://app:***@db:5432/shop?sslmode=require'
    """
    if not isinstance(dsn, str):
        return "<dsn>"
    if is_uri(dsn):
        text = _URI_USERINFO_RE.sub(lambda m: f"{m['pre']}:{_MASK}@", dsn)
        return _URI_PARAM_RE.sub(lambda m: m["pre"] + _MASK if m["key"].lower() in SECRET_KEYS else m.group(0), text)
    return _KV_RE.sub(lambda m: f"{m['key']}{m['eq']}{_MASK}" if m["key"].lower() in SECRET_KEYS else m.group(0), dsn)


def redact_secrets(text: str, dsn: str | None = None) -> str:
    """Remove secrets from a free-form message (an error text, a log line).

    Anything shaped like ``password=...`` is masked, and when ``dsn`` is given the literal text
    of its password(s) is masked wherever it appears. Passwords shorter than 3 characters are
    only masked in ``key=value`` shape: masking every ``a`` of a message helps nobody.
    """
    text = _KV_RE.sub(
        lambda m: (
            f"{m['key']}{m['eq']}{_MASK}"
            if m["key"].lower() in SECRET_KEYS and not _ALREADY_MASKED.fullmatch(m["val"])
            else m.group(0)
        ),
        text,
    )
    text = _URI_USERINFO_RE.sub(lambda m: f"{m['pre']}:{_MASK}@", text)
    if dsn:
        for secret in sorted(_secrets_in(dsn), key=len, reverse=True):
            if len(secret) >= 3:
                text = text.replace(secret, _MASK)
    return text


def dsn_params(dsn: str) -> dict[str, str]:
    """The parameters of ``dsn`` as libpq reads them (raises :class:`ValueError` if malformed)."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        return {k: str(v) for k, v in conninfo_to_dict(dsn).items()}
    except Exception as exc:  # noqa: BLE001 - psycopg.ProgrammingError; its text may quote the DSN
        raise ValueError(f"invalid connection string {redact_dsn(dsn)!r}: {redact_secrets(str(exc), dsn)}") from None


def with_defaults(dsn: str, **defaults: str) -> str:
    """``dsn`` plus ``defaults`` for the parameters it does not set (its own values win)."""
    from psycopg.conninfo import make_conninfo

    present = dsn_params(dsn)
    missing = {k: v for k, v in defaults.items() if k not in present}
    return make_conninfo(dsn, **missing) if missing else dsn
