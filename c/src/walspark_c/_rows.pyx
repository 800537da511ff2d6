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


cdef class _Columns:
    """The output of a two-pass gather: per column, first the sizes, then the Arrow buffers.

    Pass 1 adds each value's length with :meth:`count`; :meth:`allocate` then makes each
    column's buffers as fresh ``bytes`` objects, which pass 2 fills with :meth:`value` and
    :meth:`no_value` (row by row, in order) before anyone else sees them.
    """

    cdef Py_ssize_t ncols, n, bitmap_size
    cdef bint with_kinds
    cdef int64_t* totals
    cdef int32_t* filled
    cdef Py_ssize_t* nulls
    cdef int* flags
    cdef char** kinds_at
    cdef char** validity_at
    cdef char** unchanged_at
    cdef int32_t** offsets_at
    cdef char** data_at
    cdef list buffers

    def __cinit__(self, Py_ssize_t ncols, Py_ssize_t n, bint with_kinds):
        cdef Py_ssize_t size = max(ncols, 1)
        self.ncols, self.n, self.with_kinds = ncols, n, with_kinds
        self.bitmap_size = (n + 7) >> 3
        self.totals = <int64_t*>PyMem_Malloc(size * sizeof(int64_t))
        self.filled = <int32_t*>PyMem_Malloc(size * sizeof(int32_t))
        self.nulls = <Py_ssize_t*>PyMem_Malloc(size * sizeof(Py_ssize_t))
        self.flags = <int*>PyMem_Malloc(size * sizeof(int))
        self.kinds_at = <char**>PyMem_Malloc(size * sizeof(char*))
        self.validity_at = <char**>PyMem_Malloc(size * sizeof(char*))
        self.unchanged_at = <char**>PyMem_Malloc(size * sizeof(char*))
        self.offsets_at = <int32_t**>PyMem_Malloc(size * sizeof(int32_t*))
        self.data_at = <char**>PyMem_Malloc(size * sizeof(char*))
        if (self.totals == NULL or self.filled == NULL or self.nulls == NULL or self.flags == NULL
                or self.kinds_at == NULL or self.validity_at == NULL or self.unchanged_at == NULL
                or self.offsets_at == NULL or self.data_at == NULL):
            raise MemoryError()
        memset(self.totals, 0, size * sizeof(int64_t))
        memset(self.filled, 0, size * sizeof(int32_t))
        memset(self.nulls, 0, size * sizeof(Py_ssize_t))
        memset(self.flags, 0, size * sizeof(int))
        self.buffers = []

    def __dealloc__(self):
        PyMem_Free(self.totals)
        PyMem_Free(self.filled)
        PyMem_Free(self.nulls)
        PyMem_Free(self.flags)
        PyMem_Free(self.kinds_at)
        PyMem_Free(self.validity_at)
        PyMem_Free(self.unchanged_at)
        PyMem_Free(self.offsets_at)
        PyMem_Free(self.data_at)

    cdef inline void count(self, Py_ssize_t col, uint32_t length, int flag) noexcept:
        self.totals[col] += length
        self.flags[col] |= flag

    cdef bint allocate(self) except -1:
        """Make the buffers; False when a column's values pass 2 GiB (int32 offsets)."""
        cdef Py_ssize_t col
        for col in range(self.ncols):
            if self.totals[col] > _INT32_MAX:
                return False
        for col in range(self.ncols):
            kinds = PyBytes_FromStringAndSize(NULL, self.n if self.with_kinds else 0)
            validity = PyBytes_FromStringAndSize(NULL, self.bitmap_size)
            unchanged = PyBytes_FromStringAndSize(NULL, self.bitmap_size if self.with_kinds else 0)
            offsets = PyBytes_FromStringAndSize(NULL, (self.n + 1) * 4)
            data = PyBytes_FromStringAndSize(NULL, self.totals[col])
            self.buffers.append((kinds, validity, unchanged, offsets, data))
            self.kinds_at[col] = PyBytes_AS_STRING(kinds)
            self.validity_at[col] = PyBytes_AS_STRING(validity)
            self.unchanged_at[col] = PyBytes_AS_STRING(unchanged)
            self.offsets_at[col] = <int32_t*>PyBytes_AS_STRING(offsets)
            self.data_at[col] = PyBytes_AS_STRING(data)
            memset(self.validity_at[col], 0, self.bitmap_size)
            if self.with_kinds:
                memset(self.unchanged_at[col], 0, self.bitmap_size)
            self.offsets_at[col][0] = 0
        return True

    cdef inline void value(self, Py_ssize_t col, Py_ssize_t row, uint8_t kind, const uint8_t* src,
                           uint32_t length) noexcept:
        memcpy(self.data_at[col] + self.filled[col], src, length)
        self.filled[col] += <int32_t>length
        _set_bit(self.validity_at[col], row)
        self.offsets_at[col][row + 1] = self.filled[col]
        if self.with_kinds:
            self.kinds_at[col][row] = <char>kind

    cdef inline void no_value(self, Py_ssize_t col, Py_ssize_t row, uint8_t kind) noexcept:
        self.nulls[col] += 1
        self.offsets_at[col][row + 1] = self.filled[col]
        if self.with_kinds:
            self.kinds_at[col][row] = <char>kind
            if kind == K_UNCHANGED:
                _set_bit(self.unchanged_at[col], row)

    cdef list result(self):
        cdef Py_ssize_t col
        out = []
        for col in range(self.ncols):
            kinds, validity, unchanged, offsets, data = self.buffers[col]
            if self.with_kinds:
                out.append((self.flags[col], self.nulls[col], kinds, validity, unchanged, offsets, data))
            else:
                out.append((self.nulls[col], validity, offsets, data))
        return out


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
    cdef Py_ssize_t n = len(parts), row, col, pos, end
    cdef uint32_t length
    cdef uint8_t k
    cdef const uint8_t* p
    cdef object part, buf
    cdef _Columns out
    if ncols < 0:
        return None
    out = _Columns(ncols, n, True)
    # Pass 1: check every part, add up each column's bytes and note its kinds.
    for row in range(n):
        part = parts[row]
        if part is None:
            for col in range(ncols):
                out.count(col, 0, F_NULL)
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
                out.count(col, length, F_TEXT if k == K_TEXT else F_BINARY)
            elif k == K_NULL or k == K_UNCHANGED:
                pos += 1
                out.count(col, 0, F_NULL if k == K_NULL else F_UNCHANGED)
            else:
                return None
    if not out.allocate():
        return None
    # Pass 2: copy (every read was checked in pass 1).
    for row in range(n):
        part = parts[row]
        if part is None:
            for col in range(ncols):
                out.no_value(col, row, K_NULL)
            continue
        p = <const uint8_t*>PyBytes_AS_STRING((<tuple>part)[0])
        pos = (<tuple>part)[1] + 2
        for col in range(ncols):
            k = p[pos]
            if k == K_TEXT or k == K_BINARY:
                length = _u32(p + pos + 1)
                out.value(col, row, k, p + pos + 5, length)
                pos += 5 + length
            else:
                out.no_value(col, row, k)
                pos += 1
    return out.result()


def split_copy_rows(list chunks not None, Py_ssize_t ncols):
    """Rows of a binary COPY (one CopyData message per row, header and trailer removed) as Arrow
    buffers per column, or None when a message is not exactly one row of ``ncols`` fields.

    Returns one tuple per column: ``(null_count, validity, offsets, data)`` as in
    :func:`gather_columns` (a field of negative length is NULL, as in
    ``walspark.spark.snapshot.snapshot_source.split_rows``). On None the caller's reference
    splitter reads the rows and raises its precise error.
    """
    cdef Py_ssize_t n = len(chunks), row, col, pos, end
    cdef int32_t length
    cdef const uint8_t* p
    cdef object buf
    cdef _Columns out
    if ncols < 0:
        return None
    out = _Columns(ncols, n, False)
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
                out.count(col, length, F_BINARY)
        if pos != end:
            return None
    if not out.allocate():
        return None
    # Pass 2: copy (every read was checked in pass 1).
    for row in range(n):
        p = <const uint8_t*>PyBytes_AS_STRING(chunks[row])
        pos = 2
        for col in range(ncols):
            length = <int32_t>_u32(p + pos)
            pos += 4
            if length >= 0:
                out.value(col, row, K_BINARY, p + pos, length)
                pos += length
            else:
                out.no_value(col, row, K_NULL)
    return out.result()
