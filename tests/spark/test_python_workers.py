"""A session whose Python workers cannot import walspark is refused in one line, before any query."""

from __future__ import annotations

import shutil
import sys

import pytest

from walspark.spark.session import PythonWorkersError, check_python_workers

pytestmark = pytest.mark.spark


def test_workers_of_this_interpreter_pass(spark) -> None:
    assert spark.sparkContext.pythonExec == sys.executable  # walspark's session sets it
    check_python_workers(spark)


def test_workers_that_cannot_import_walspark_are_named_with_the_setting_to_fix(spark, monkeypatch) -> None:
    other = shutil.which("python3", path="/usr/bin")
    if other is None:
        pytest.fail("the host has no /usr/bin/python3 to stand for a notebook's other interpreter")
    monkeypatch.setattr(spark.sparkContext, "pythonExec", other)  # as with PYSPARK_PYTHON unset in a notebook
    with pytest.raises(PythonWorkersError) as caught:
        check_python_workers(spark)
    line = str(caught.value)
    assert "\n" not in line and other in line and "cannot import walspark" in line
    assert f"os.environ['PYSPARK_PYTHON'] = {sys.executable!r}" in line and f"PYSPARK_PYTHON={sys.executable}" in line
