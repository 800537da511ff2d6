# cython: language_level=3
"""Row changes (Insert / Update / Delete) of pgoutput, scanned in C, their values gathered into Arrow buffers.

Three functions, each the compiled twin of a pure-Python step of walspark:

* :func:`scan_row_change` reads the head of a row change and checks its TupleData parts —
  what ``walspark.protocol.decoder``'s row-change decoders do — but does not slice out the
  values: it returns where each part starts. It accepts exactly the messages the pure decoder
  decodes; on anything else it returns None and the caller hands the message to the pure
  decoder, which raises the precise ``ProtocolError``. Errors are therefore always the
  reference's.
* :func:`gather_columns` walks the parts of many row changes once and writes, per column, the
  buffers of an Arrow ``binary`` array (validity bitmap, int32 offsets, data), the TupleData
  kind of each row, and a bitmap of the unchanged-TOAST rows. No Python object is made per
  value: pyarrow wraps the buffers as they are.
* :func:`split_copy_rows` does the same for the rows of a binary COPY (the snapshot), whose
  fields have the layout of binary pgoutput values.

Every read is bounds-checked (a hostile length or count returns None, never reads past the
buffer), and every loop is bounded by the bytes it consumes.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.string cimport memcpy, memset

cdef enum:
    K_TEXT = 116      # 't'
    K_BINARY = 98     # 'b'
    K_NULL = 110      # 'n'
    K_UNCHANGED = 117 # 'u'
    T_NEW = 78        # 'N'
    T_KEY = 75        # 'K'
    T_OLD = 79        # 'O'
    M_INSERT = 73     # 'I'
    M_UPDATE = 85     # 'U'
    M_DELETE = 68     # 'D'

cdef enum:
    F_TEXT = 1
    F_BINARY = 2
    F_UNCHANGED = 4
    F_NULL = 8

#: Flags of a gathered column: which TupleData kinds it holds.
HAS_TEXT = F_TEXT
HAS_BINARY = F_BINARY
HAS_UNCHANGED = F_UNCHANGED
HAS_NULL = F_NULL

cdef int64_t _INT32_MAX = 2147483647


cdef inline uint32_t _u32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3]


cdef inline Py_ssize_t _u16(const uint8_t* p) noexcept nogil:
    return (<Py_ssize_t>p[0] << 8) | <Py_ssize_t>p[1]


cdef Py_ssize_t _skip_tuple(const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end) noexcept nogil:
    """The offset just after a valid TupleData part at ``pos``, or -1."""
    cdef Py_ssize_t ncols, i
    cdef uint32_t length
    cdef uint8_t k
    if end - pos < 2:
        return -1
    ncols = _u16(buf + pos)
    pos += 2
    for i in range(ncols):
        if pos >= end:
            return -1
        k = buf[pos]
        if k == K_TEXT or k == K_BINARY:
            if end - pos < 5:
                return -1
            length = _u32(buf + pos + 1)
            pos += 5
            if <int64_t>length > <int64_t>(end - pos):  # a negative Int32 reads as >= 2**31: never fits
                return -1
            pos += length
        elif k == K_NULL or k == K_UNCHANGED:
            pos += 1
        else:
            return -1
    return pos


def scan_row_change(bytes buf not None, bint in_stream):
    """Where the parts of a valid Insert / Update / Delete start, or None.

    Returns ``(kind, xid, relation_id, key_pos, old_pos, new_pos)``: ``kind`` is the message's
    kind byte, ``xid`` the in-stream Xid or None, each ``*_pos`` the offset of that TupleData
    part (its Int16 column count) or -1 where the message has none. None for any other message,
    and for any row change the pure decoder would refuse.
    """
    cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(buf)
    cdef Py_ssize_t end = PyBytes_GET_SIZE(buf)
    cdef Py_ssize_t pos = 1, first, key_pos = -1, old_pos = -1, new_pos = -1
    cdef uint32_t xid = 0, relation_id
    cdef uint8_t kind, tag, second
    if end < 1:
        return None
    kind = p[0]
    if kind != M_INSERT and kind != M_UPDATE and kind != M_DELETE:
        return None
    if in_stream:
        if end < 5:
            return None
        xid = _u32(p + 1)
        if xid == 0:
            return None
        pos = 5
    if end - pos < 5:
        return None
    relation_id = _u32(p + pos)
    tag = p[pos + 4]
    pos += 5
    if kind == M_INSERT:
        if tag != T_NEW:
            return None
        new_pos = pos
        pos = _skip_tuple(p, pos, end)
    elif kind == M_UPDATE:
        if tag == T_KEY or tag == T_OLD:
            first = pos
            pos = _skip_tuple(p, pos, end)
            if pos < 0 or pos >= end:
                return None
            second = p[pos]
            if second != T_NEW:
                return None
            if tag == T_KEY:
                key_pos = first
            else:
                old_pos = first
            pos += 1
        elif tag != T_NEW:
            return None
        new_pos = pos
        pos = _skip_tuple(p, pos, end)
    else:
        if tag == T_KEY:
            key_pos = pos
        elif tag == T_OLD:
            old_pos = pos
        else:
            return None
        pos = _skip_tuple(p, pos, end)
    if pos != end:
        return None
    return (kind, xid if in_stream else None, relation_id, key_pos, old_pos, new_pos)


cdef inline void _set_bit(char* bitmap, Py_ssize_t i) noexcept nogil:
    bitmap[i >> 3] = <char>(<uint8_t>bitmap[i >> 3] | (1 << (i & 7)))


def gather_columns(list parts not None, Py_ssize_t ncols):
    """The TupleData parts of many rows, column by column, as Arrow buffers; None if they do not fit.

    ``parts``: per row, None (no such part: every column NULL) or ``(message bytes, offset of
    the part)``. Every part must have ``ncols`` columns; a part that does not (or is not a valid
    TupleData, or a column whose values pass 2 GiB) makes the whole call return None, and the
    caller takes the pure-Python path, which decides what such rows mean.

    Returns one tuple per column: ``(flags, null_count, kinds, validity, unchanged, offsets,
    data)`` — ``flags`` ORs ``HAS_*``; ``kinds`` one byte per row (``b'n'`` for absent rows);
    ``validity`` the bitmap of rows with a value ('t' or 'b'); ``unchanged`` the bitmap of 'u'
    rows; ``offsets`` n + 1 int32 in the machine's byte order (Arrow's); ``data`` the values end to end.
    """
    cdef Py_ssize_t n = len(parts), row, col, pos, end, bitmap_size
    cdef uint32_t length
    cdef uint8_t k
    cdef const uint8_t* p
    cdef object part, buf
    cdef int64_t* totals = NULL
    cdef int* flags = NULL
    cdef char** kinds_at = NULL
    cdef char** validity_at = NULL
    cdef char** unchanged_at = NULL
    cdef int32_t** offsets_at = NULL
    cdef char** data_at = NULL
    cdef int32_t* filled = NULL
    cdef Py_ssize_t* nulls = NULL
    cdef list outputs = []
    if ncols < 0:
        return None
    bitmap_size = (n + 7) >> 3
    totals = <int64_t*>PyMem_Malloc(max(ncols, 1) * sizeof(int64_t))
    flags = <int*>PyMem_Malloc(max(ncols, 1) * sizeof(int))
    kinds_at = <char**>PyMem_Malloc(max(ncols, 1) * sizeof(char*))
    validity_at = <char**>PyMem_Malloc(max(ncols, 1) * sizeof(char*))
    unchanged_at = <char**>PyMem_Malloc(max(ncols, 1) * sizeof(char*))
    offsets_at = <int32_t**>PyMem_Malloc(max(ncols, 1) * sizeof(int32_t*))
    data_at = <char**>PyMem_Malloc(max(ncols, 1) * sizeof(char*))
    filled = <int32_t*>PyMem_Malloc(max(ncols, 1) * sizeof(int32_t))
    nulls = <Py_ssize_t*>PyMem_Malloc(max(ncols, 1) * sizeof(Py_ssize_t))
    if (totals == NULL or flags == NULL or kinds_at == NULL or validity_at == NULL or unchanged_at == NULL
            or offsets_at == NULL or data_at == NULL or filled == NULL or nulls == NULL):
        _free(totals, flags, kinds_at, validity_at, unchanged_at, offsets_at, data_at, filled, nulls)
        raise MemoryError()
    try:
        for col in range(ncols):
            totals[col] = 0
            flags[col] = 0
            filled[col] = 0
            nulls[col] = 0
        # Pass 1: check every part, add up each column's bytes and note its kinds.
        for row in range(n):
            part = parts[row]
            if part is None:
                for col in range(ncols):
                    flags[col] |= F_NULL
                continue
            if type(part) is not tuple or len(<tuple>part) != 2:
                return None
            buf = (<tuple>part)[0]
            if type(buf) is not bytes:
                return None
            pos = (<tuple>part)[1]
            end = PyBytes_GET_SIZE(buf)
            p = <const uint8_t*>PyBytes_AS_STRING(buf)
            if pos < 0 or end - pos < 2 or _u16(p + pos) != ncols:
                return None
            pos += 2
            for col in range(ncols):
                if pos >= end:
                    return None
                k = p[pos]
                if k == K_TEXT or k == K_BINARY:
                    if end - pos < 5:
                        return None
                    length = _u32(p + pos + 1)
                    pos += 5
                    if <int64_t>length > <int64_t>(end - pos):
                        return None
                    pos += length
                    totals[col] += length
                    flags[col] |= F_TEXT if k == K_TEXT else F_BINARY
                elif k == K_NULL:
                    pos += 1
                    flags[col] |= F_NULL
                elif k == K_UNCHANGED:
                    pos += 1
                    flags[col] |= F_UNCHANGED
                else:
                    return None
        for col in range(ncols):
            if totals[col] > _INT32_MAX:
                return None
        # Allocate each column's buffers (fresh bytes objects, filled before anyone sees them).
        for col in range(ncols):
            kinds = PyBytes_FromStringAndSize(NULL, n)
            validity = PyBytes_FromStringAndSize(NULL, bitmap_size)
            unchanged = PyBytes_FromStringAndSize(NULL, bitmap_size)
            offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * 4)
            data = PyBytes_FromStringAndSize(NULL, totals[col])
            outputs.append([flags[col], 0, kinds, validity, unchanged, offsets, data])
            kinds_at[col] = PyBytes_AS_STRING(kinds)
            validity_at[col] = PyBytes_AS_STRING(validity)
            unchanged_at[col] = PyBytes_AS_STRING(unchanged)
            offsets_at[col] = <int32_t*>PyBytes_AS_STRING(offsets)
            data_at[col] = PyBytes_AS_STRING(data)
            memset(validity_at[col], 0, bitmap_size)
            memset(unchanged_at[col], 0, bitmap_size)
            offsets_at[col][0] = 0
        # Pass 2: copy (every read was checked in pass 1).
        for row in range(n):
            part = parts[row]
            if part is None:
                for col in range(ncols):
                    kinds_at[col][row] = K_NULL
                    offsets_at[col][row + 1] = filled[col]
                    nulls[col] += 1
                continue
            buf = (<tuple>part)[0]
            pos = (<tuple>part)[1] + 2
            p = <const uint8_t*>PyBytes_AS_STRING(buf)
            for col in range(ncols):
                k = p[pos]
                kinds_at[col][row] = <char>k
                if k == K_TEXT or k == K_BINARY:
                    length = _u32(p + pos + 1)
                    pos += 5
                    memcpy(data_at[col] + filled[col], p + pos, length)
                    pos += length
                    filled[col] += <int32_t>length
                    _set_bit(validity_at[col], row)
                else:
                    pos += 1
                    nulls[col] += 1
                    if k == K_UNCHANGED:
                        _set_bit(unchanged_at[col], row)
                offsets_at[col][row + 1] = filled[col]
        for col in range(ncols):
            outputs[col][1] = nulls[col]
        return [tuple(o) for o in outputs]
    finally:
        _free(totals, flags, kinds_at, validity_at, unchanged_at, offsets_at, data_at, filled, nulls)


cdef void _free(void* a, void* b, void* c, void* d, void* e, void* f, void* g, void* h, void* i) noexcept:
    PyMem_Free(a)
    PyMem_Free(b)
    PyMem_Free(c)
    PyMem_Free(d)
    PyMem_Free(e)
    PyMem_Free(f)
    PyMem_Free(g)
    PyMem_Free(h)
    PyMem_Free(i)


def split_copy_rows(list chunks not None, Py_ssize_t ncols):
    """Rows of a binary COPY (one CopyData message per row, header and trailer removed) as Arrow
    buffers per column, or None when a message is not exactly one row of ``ncols`` fields.

    Returns one tuple per column: ``(null_count, validity, offsets, data)`` as in
    :func:`gather_columns` (a field of negative length is NULL, as in
    ``walspark.spark.snapshot.snapshot_source.split_rows``). On None the caller's reference
    splitter reads the rows and raises its precise error.
    """
    cdef Py_ssize_t n = len(chunks), row, col, pos, end, bitmap_size
    cdef int32_t length
    cdef const uint8_t* p
    cdef object buf
    cdef int64_t* totals = NULL
    cdef char** validity_at = NULL
    cdef int32_t** offsets_at = NULL
    cdef char** data_at = NULL
    cdef int32_t* filled = NULL
    cdef Py_ssize_t* nulls = NULL
    cdef list outputs = []
    if ncols < 0:
        return None
    bitmap_size = (n + 7) >> 3
    totals = <int64_t*>PyMem_Malloc(max(ncols, 1) * sizeof(int64_t))
    validity_at = <char**>PyMem_Malloc(max(ncols, 1) * sizeof(char*))
    offsets_at = <int32_t**>PyMem_Malloc(max(ncols, 1) * sizeof(int32_t*))
    data_at = <char**>PyMem_Malloc(max(ncols, 1) * sizeof(char*))
    filled = <int32_t*>PyMem_Malloc(max(ncols, 1) * sizeof(int32_t))
    nulls = <Py_ssize_t*>PyMem_Malloc(max(ncols, 1) * sizeof(Py_ssize_t))
    if (totals == NULL or validity_at == NULL or offsets_at == NULL or data_at == NULL or filled == NULL
            or nulls == NULL):
        _free(totals, validity_at, offsets_at, data_at, filled, nulls, NULL, NULL, NULL)
        raise MemoryError()
    try:
        for col in range(ncols):
            totals[col] = 0
            filled[col] = 0
            nulls[col] = 0
        # Pass 1: every message is one row of ncols fields, each inside the message.
        for row in range(n):
            buf = chunks[row]
            if type(buf) is not bytes:
                return None
            end = PyBytes_GET_SIZE(buf)
            p = <const uint8_t*>PyBytes_AS_STRING(buf)
            if end < 2 or _u16(p) != ncols:
                return None
            pos = 2
            for col in range(ncols):
                if end - pos < 4:
                    return None
                length = <int32_t>_u32(p + pos)
                pos += 4
                if length >= 0:
                    if <int64_t>length > <int64_t>(end - pos):
                        return None
                    pos += length
                    totals[col] += length
            if pos != end:
                return None
        for col in range(ncols):
            if totals[col] > _INT32_MAX:
                return None
        for col in range(ncols):
            validity = PyBytes_FromStringAndSize(NULL, bitmap_size)
            offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * 4)
            data = PyBytes_FromStringAndSize(NULL, totals[col])
            outputs.append([0, validity, offsets, data])
            validity_at[col] = PyBytes_AS_STRING(validity)
            offsets_at[col] = <int32_t*>PyBytes_AS_STRING(offsets)
            data_at[col] = PyBytes_AS_STRING(data)
            memset(validity_at[col], 0, bitmap_size)
            offsets_at[col][0] = 0
        # Pass 2: copy (every read was checked in pass 1).
        for row in range(n):
            p = <const uint8_t*>PyBytes_AS_STRING(chunks[row])
            pos = 2
            for col in range(ncols):
                length = <int32_t>_u32(p + pos)
                pos += 4
                if length >= 0:
                    memcpy(data_at[col] + filled[col], p + pos, length)
                    pos += length
                    filled[col] += length
                    _set_bit(validity_at[col], row)
                else:
                    nulls[col] += 1
                offsets_at[col][row + 1] = filled[col]
        for col in range(ncols):
            outputs[col][0] = nulls[col]
        return [tuple(o) for o in outputs]
    finally:
        _free(totals, validity_at, offsets_at, data_at, filled, nulls, NULL, NULL, NULL)
