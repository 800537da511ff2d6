"""The driver JVM's options: how it compiles (``$WALSPARK_JIT``, short-lived sessions)."""

from __future__ import annotations

import logging

import pytest

from walspark.spark.session import JIT_ENV, jit_options

#: C1 alone, with tiered compilation's code cache (C1 alone would get 48 MB, which long runs fill).
C1_ONLY = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"


@pytest.mark.parametrize(("setting", "short_lived", "expected"), [
    (None, True, C1_ONLY),   # a --once run, the demo: C2's warm-up is not repaid
    (None, False, ""),       # a stream, a copy: the JVM's tiered compilation
    ("quick", False, C1_ONLY),
    ("full", True, ""),
    (" Quick ", False, C1_ONLY),
])  # fmt: skip
def test_short_lived_sessions_compile_with_c1_alone_unless_told(
    setting: str | None, short_lived: bool, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if setting is None:
        monkeypatch.delenv(JIT_ENV, raising=False)
    else:
        monkeypatch.setenv(JIT_ENV, setting)
    assert jit_options(short_lived) == expected


def test_an_unknown_setting_is_said_and_ignored(monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:  # fmt: skip
    monkeypatch.setenv(JIT_ENV, "c2")
    with caplog.at_level(logging.WARNING):
        assert jit_options(True) == C1_ONLY
        assert jit_options(False) == ""
    assert "'c2', neither 'quick' nor 'full'" in caplog.text
