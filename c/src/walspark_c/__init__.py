"""walspark's optional compiled hot path.

Like psycopg's ``psycopg_c`` beside ``psycopg``: a sibling package with the same results as
the pure-Python code it replaces, which stays the reference and the fallback. walspark uses it
when it is installed (see :mod:`walspark.compiled`); ``WALSPARK_PURE_PYTHON=1`` turns it off.
"""

from ._rows import (
    COPY_END,
    COPY_FAILED,
    COPY_HEADER,
    COPY_MORE,
    COPY_WAIT,
    HAS_BINARY,
    HAS_NULL,
    HAS_TEXT,
    HAS_UNCHANGED,
    RowBatch,
    add_row_changes,
    fixed_width,
    gather_columns,
    numeric_decimal128,
    read_copy_frames,
    read_copy_rows,
    scan_row_change,
    split_copy_buffer,
    split_copy_rows,
)

__all__ = ["API", "COPY_END", "COPY_FAILED", "COPY_HEADER", "COPY_MORE", "COPY_WAIT", "HAS_BINARY", "HAS_NULL", "HAS_TEXT",
           "HAS_UNCHANGED", "RowBatch", "add_row_changes", "fixed_width", "gather_columns", "numeric_decimal128",
           "read_copy_frames", "read_copy_rows", "scan_row_change", "split_copy_buffer", "split_copy_rows"]
__version__ = "0.4.0"

#: The interface walspark expects (walspark.compiled checks it): a walspark_c built from older
#: sources is not used, rather than failing half-way.
API = 4
