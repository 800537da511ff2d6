# cython: language_level=3
"""pgoutput row changes scanned in C and kept as C structs, their values gathered into Arrow buffers.

Each function is the compiled twin of a pure-Python step of walspark:

* :func:`scan_row_change` reads the head of a row change and checks its TupleData parts —
  what ``walspark.protocol.decoder``'s row-change decoders do — but does not slice out the
  values: it returns where each part starts. It accepts exactly the messages the pure decoder
  decodes; on anything else it returns None and the caller hands the message to the pure
  decoder, which raises the precise ``ProtocolError``. Errors are therefore always the
  reference's.
* :func:`add_row_changes` is the message loop of ``ChangeRowBuilder.add``: it scans each
  message and keeps a valid row change of a known relation as one C struct in that relation
  version's :class:`RowBatch` (no Python object per row); it stops at the first message it
  cannot keep and hands it back to the caller, which handles it as the pure path does.
* :class:`RowBatch` turns its rows into Arrow buffers: the envelope columns (``envelope``)
  and each part's values (``gather``, as :func:`gather_columns` does).
* :func:`gather_columns` walks the parts of many row changes once and writes, per column, the
  buffers of an Arrow ``binary`` array (validity bitmap, int32 offsets, data), the TupleData
  kind of each row, and a bitmap of the unchanged-TOAST rows. No Python object is made per
  value: pyarrow wraps the buffers as they are.
* :func:`split_copy_rows` does the same for the rows of a binary COPY (the snapshot), whose
  fields have the layout of binary pgoutput values.
* :func:`fixed_width` byte-swaps a binary array of fixed-size big-endian values (int2/4/8,
  float4/8, date, timestamp) into the buffer of a fixed-width Arrow array.

Every read is bounds-checked (a hostile length, count or offset returns None, never reads past
the buffer), and every loop is bounded by the bytes or items it consumes.
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_AsVoidPtr, PyLong_CheckExact
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcmp, memcpy, memset

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


cdef struct _Scan:
    uint8_t kind
    uint32_t xid
    uint32_t relation_id
    Py_ssize_t key_pos
    Py_ssize_t old_pos
    Py_ssize_t new_pos


cdef bint _scan(const uint8_t* p, Py_ssize_t end, bint in_stream, _Scan* out) noexcept nogil:
    """Check a row change completely and note where its parts start; False for anything the
    pure decoder would not decode as an Insert / Update / Delete."""
    cdef Py_ssize_t pos = 1, first
    cdef uint8_t kind, tag, second
    out.xid = 0
    out.key_pos = -1
    out.old_pos = -1
    out.new_pos = -1
    if end < 1:
        return False
    kind = p[0]
    if kind != M_INSERT and kind != M_UPDATE and kind != M_DELETE:
        return False
    out.kind = kind
    if in_stream:
        if end < 5:
            return False
        out.xid = _u32(p + 1)
        if out.xid == 0:
            return False
        pos = 5
    if end - pos < 5:
        return False
    out.relation_id = _u32(p + pos)
    tag = p[pos + 4]
    pos += 5
    if kind == M_INSERT:
        if tag != T_NEW:
            return False
        out.new_pos = pos
        pos = _skip_tuple(p, pos, end)
    elif kind == M_UPDATE:
        if tag == T_KEY or tag == T_OLD:
            first = pos
            pos = _skip_tuple(p, pos, end)
            if pos < 0 or pos >= end:
                return False
            second = p[pos]
            if second != T_NEW:
                return False
            if tag == T_KEY:
                out.key_pos = first
            else:
                out.old_pos = first
            pos += 1
        elif tag != T_NEW:
            return False
        out.new_pos = pos
        pos = _skip_tuple(p, pos, end)
    else:
        if tag == T_KEY:
            out.key_pos = pos
        elif tag == T_OLD:
            out.old_pos = pos
        else:
            return False
        pos = _skip_tuple(p, pos, end)
    return pos == end


def scan_row_change(bytes buf not None, bint in_stream):
    """Where the parts of a valid Insert / Update / Delete start, or None.

    Returns ``(kind, xid, relation_id, key_pos, old_pos, new_pos)``: ``kind`` is the message's
    kind byte, ``xid`` the in-stream Xid or None, each ``*_pos`` the offset of that TupleData
    part (its Int16 column count) or -1 where the message has none. None for any other message,
    and for any row change the pure decoder would refuse.
    """
    cdef _Scan head
    if not _scan(<const uint8_t*>PyBytes_AS_STRING(buf), PyBytes_GET_SIZE(buf), in_stream, &head):
        return None
    return (head.kind, head.xid if in_stream else None, head.relation_id, head.key_pos, head.old_pos, head.new_pos)


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


cdef object _gather(list messages, const Py_ssize_t* positions, Py_ssize_t n, Py_ssize_t ncols):
    """The core of :func:`gather_columns`: row ``i``'s part is at ``positions[i]`` in
    ``messages[i]``, or absent where ``positions[i]`` is -1 (every column NULL)."""
    cdef Py_ssize_t row, col, pos, end
    cdef uint32_t length
    cdef uint8_t k
    cdef const uint8_t* p
    cdef object buf
    cdef _Columns out
    if ncols < 0 or len(messages) < n:
        return None
    out = _Columns(ncols, n, True)
    # Pass 1: check every part, add up each column's bytes and note its kinds.
    for row in range(n):
        pos = positions[row]
        if pos == -1:
            for col in range(ncols):
                out.count(col, 0, F_NULL)
            continue
        buf = messages[row]
        if type(buf) is not bytes:
            return None
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
    # Pass 2: copy (every read was checked in pass 1; the list was not changed since: no Python ran).
    for row in range(n):
        pos = positions[row]
        if pos == -1:
            for col in range(ncols):
                out.no_value(col, row, K_NULL)
            continue
        p = <const uint8_t*>PyBytes_AS_STRING(messages[row])
        pos += 2
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
    cdef Py_ssize_t n = len(parts), row, pos
    cdef Py_ssize_t* positions
    cdef list messages = [None] * n
    cdef object part
    if ncols < 0:
        return None
    positions = <Py_ssize_t*>PyMem_Malloc(max(n, 1) * sizeof(Py_ssize_t))
    if positions == NULL:
        raise MemoryError()
    try:
        for row in range(n):
            part = parts[row]
            if part is None:
                positions[row] = -1
                continue
            if type(part) is not tuple or len(<tuple>part) != 2 or type((<tuple>part)[0]) is not bytes:
                return None
            pos = (<tuple>part)[1]
            if pos < 0:
                return None
            messages[row] = (<tuple>part)[0]
            positions[row] = pos
        return _gather(messages, positions, n, ncols)
    finally:
        PyMem_Free(positions)


cdef object _split_rows(const uint8_t** rows, const Py_ssize_t* sizes, Py_ssize_t n, Py_ssize_t ncols):
    """The core of :func:`split_copy_rows` and :func:`read_copy_rows`: row ``i`` is the
    ``sizes[i]`` bytes at ``rows[i]``; None when one is not exactly one row of ``ncols`` fields."""
    cdef Py_ssize_t row, col, pos, end
    cdef int32_t length
    cdef const uint8_t* p
    cdef _Columns out
    if ncols < 0:
        return None
    out = _Columns(ncols, n, False)
    # Pass 1: every message is one row of ncols fields, each inside the message.
    for row in range(n):
        end = sizes[row]
        p = rows[row]
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
        p = rows[row]
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


def split_copy_rows(list chunks not None, Py_ssize_t ncols):
    """Rows of a binary COPY (one CopyData message per row, header and trailer removed) as Arrow
    buffers per column, or None when a message is not exactly one row of ``ncols`` fields.

    Returns one tuple per column: ``(null_count, validity, offsets, data)`` as in
    :func:`gather_columns` (a field of negative length is NULL, as in
    ``walspark.spark.snapshot.pgsnapshot.split_rows``). On None the caller's reference
    splitter reads the rows and raises its precise error.
    """
    cdef Py_ssize_t n = len(chunks), row
    cdef const uint8_t** rows
    cdef Py_ssize_t* sizes
    cdef object buf
    if ncols < 0:
        return None
    for row in range(n):
        if type(chunks[row]) is not bytes:
            return None
    rows = <const uint8_t**>PyMem_Malloc(max(n, 1) * sizeof(uint8_t*))
    sizes = <Py_ssize_t*>PyMem_Malloc(max(n, 1) * sizeof(Py_ssize_t))
    try:
        if rows == NULL or sizes == NULL:
            raise MemoryError()
        for row in range(n):
            buf = chunks[row]
            rows[row] = <const uint8_t*>PyBytes_AS_STRING(buf)
            sizes[row] = PyBytes_GET_SIZE(buf)
        # No Python runs in the core, so the list (which holds the bytes) stays as it is.
        return _split_rows(rows, sizes, n, ncols)
    finally:
        PyMem_Free(rows)
        PyMem_Free(sizes)


# --------------------------------------------------------------------------- the COPY read loop

ctypedef int (*_GetCopyData)(void* conn, char** buffer, int async_) noexcept nogil
ctypedef void (*_FreeMem)(void* ptr) noexcept nogil

cdef enum:
    S_MORE = 0    # max_rows rows read; the stream goes on
    S_END = 1     # the stream ended (PQgetCopyData -1): the caller fetches the COPY's result
    S_FAILED = 2  # PQgetCopyData -2: the caller reports the connection's error message
    S_HEADER = 3  # a first message whose header this loop does not take: handed back, nothing else read
    S_WAIT = 4    # (read_copy_frames) libpq holds no whole message: consume input, poll

#: What :func:`read_copy_rows` stopped at.
COPY_MORE = S_MORE
COPY_END = S_END
COPY_FAILED = S_FAILED
COPY_HEADER = S_HEADER
COPY_WAIT = S_WAIT

cdef const char* _SIGNATURE = b"PGCOPY\n\xff\r\n\x00"


cdef Py_ssize_t _header_size(const uint8_t* p, Py_ssize_t size) noexcept nogil:
    """Bytes of the binary COPY header at the start of the first message, or -1 when it is not
    one this loop takes (a wrong signature, OIDs, an extension running past the message): the
    reference's ``strip_copy_header`` then decides."""
    cdef uint32_t ext
    if size < 19 or memcmp(p, _SIGNATURE, 11) != 0 or (_u32(p + 11) & 0x00010000):
        return -1
    ext = _u32(p + 15)
    if <int64_t>ext > <int64_t>(size - 19):
        return -1
    return 19 + <Py_ssize_t>ext


cdef struct _Kept:
    # The rows read so far, end to end in one buffer (C memory: filled without the GIL).
    char* data
    int64_t size
    int64_t capacity
    int64_t* ends
    Py_ssize_t n
    Py_ssize_t ends_capacity


cdef int _keep(_Kept* kept, const char* p, int64_t size) noexcept nogil:
    """Append one message; -1 when memory runs out."""
    cdef int64_t capacity
    cdef Py_ssize_t ends_capacity
    cdef void* grown
    if kept.size + size > kept.capacity:
        capacity = max(kept.capacity * 2, kept.size + size, <int64_t>65536)
        grown = realloc(kept.data, <size_t>capacity)
        if grown == NULL:
            return -1
        kept.data, kept.capacity = <char*>grown, capacity
    if kept.n == kept.ends_capacity:
        ends_capacity = max(kept.ends_capacity * 2, <Py_ssize_t>1024)
        grown = realloc(kept.ends, <size_t>ends_capacity * sizeof(int64_t))
        if grown == NULL:
            return -1
        kept.ends, kept.ends_capacity = <int64_t*>grown, ends_capacity
    memcpy(kept.data + kept.size, p, <size_t>size)
    kept.size += size
    kept.ends[kept.n] = kept.size
    kept.n += 1
    return 0


def read_copy_rows(object pgconn not None, object get_copy_data not None, object free_mem not None,
                   Py_ssize_t ncols, Py_ssize_t max_rows, bint first):
    """Read up to ``max_rows`` rows of a binary ``COPY ... TO STDOUT`` from libpq, as raw columns.

    ``pgconn`` is the connection's ``PGconn*``; ``get_copy_data`` and ``free_mem`` the addresses
    of ``PQgetCopyData`` and ``PQfreemem`` in the libpq that made it (the caller finds them). The
    loop runs in C without the GIL: ``PQgetCopyData`` (synchronous: libpq waits for the socket)
    per message, the header of the first one stripped (``first``), the trailer (``\\xff\\xff``)
    skipped, each row copied into one buffer, which is then split as :func:`split_copy_rows`
    does. What the pure loop does with the same messages is the reference.

    Returns ``(status, n, columns, rows)``: ``status`` one of ``COPY_*``; ``n`` the rows read;
    ``columns`` the ``(null_count, validity, offsets, data)`` of each column, or None when a row
    is not exactly one of ``ncols`` fields (or a column passes 2 GiB) — ``rows`` then holds the
    ``n`` rows as ``bytes`` for the reference splitter, which decides (and raises its error).
    ``COPY_HEADER`` returns ``rows = [the first message]`` as it came, nothing else read;
    ``COPY_FAILED`` returns no rows (the reference raises before yielding them).
    """
    cdef void* conn = PyLong_AsVoidPtr(pgconn)
    cdef _GetCopyData get = <_GetCopyData>PyLong_AsVoidPtr(get_copy_data)
    cdef _FreeMem free_ = <_FreeMem>PyLong_AsVoidPtr(free_mem)
    cdef _Kept kept
    cdef char* buf
    cdef const uint8_t* p
    cdef int got
    cdef Py_ssize_t skip, size, row
    cdef int status = S_MORE
    cdef bint failed_memory = False
    cdef const uint8_t** rows
    cdef Py_ssize_t* sizes
    if conn == NULL or <void*>get == NULL or <void*>free_ == NULL:
        raise ValueError("read_copy_rows needs a connection and libpq's PQgetCopyData and PQfreemem")
    if ncols < 0 or max_rows < 1:
        raise ValueError("read_copy_rows needs ncols >= 0 and max_rows >= 1")
    memset(&kept, 0, sizeof(kept))
    try:
        with nogil:
            while kept.n < max_rows:
                buf = NULL
                got = get(conn, &buf, 0)
                if got == -1:
                    status = S_END
                    break
                if got < -1:
                    status = S_FAILED
                    break
                if got == 0 or buf == NULL:  # never in synchronous mode (libpq waits, drops empty messages)
                    if buf != NULL:
                        free_(buf)
                    continue
                p = <const uint8_t*>buf
                size = got
                if first:
                    skip = _header_size(p, size)
                    if skip < 0:
                        if _keep(&kept, buf, size) < 0:
                            failed_memory = True
                        else:
                            status = S_HEADER
                        free_(buf)
                        break
                    first = False
                    p += skip
                    size -= skip
                    if size == 0:
                        free_(buf)
                        continue
                if size == 2 and p[0] == 0xff and p[1] == 0xff:  # the trailer; the stream ends right after it
                    free_(buf)
                    continue
                if _keep(&kept, <const char*>p, size) < 0:
                    failed_memory = True
                    free_(buf)
                    break
                free_(buf)
        if failed_memory:
            raise MemoryError()
        if status == S_HEADER:
            return status, 0, None, [PyBytes_FromStringAndSize(kept.data, kept.ends[0])]
        if status == S_FAILED:
            return status, 0, None, None
        rows = <const uint8_t**>PyMem_Malloc(max(kept.n, 1) * sizeof(uint8_t*))
        sizes = <Py_ssize_t*>PyMem_Malloc(max(kept.n, 1) * sizeof(Py_ssize_t))
        try:
            if rows == NULL or sizes == NULL:
                raise MemoryError()
            for row in range(kept.n):
                rows[row] = <const uint8_t*>kept.data + (kept.ends[row - 1] if row else 0)
                sizes[row] = <Py_ssize_t>(kept.ends[row] - (kept.ends[row - 1] if row else 0))
            columns = _split_rows(rows, sizes, kept.n, ncols)
            if columns is not None:
                return status, kept.n, columns, None
            return status, kept.n, None, [PyBytes_FromStringAndSize(<const char*>rows[row], sizes[row])
                                         for row in range(kept.n)]
        finally:
            PyMem_Free(rows)
            PyMem_Free(sizes)
    finally:
        free(kept.data)
        free(kept.ends)


def read_copy_frames(object pgconn not None, object get_copy_data not None, object free_mem not None,
                     Py_ssize_t limit):
    """Up to ``limit`` CopyData messages libpq already holds, each as ``bytes``, without waiting.

    The replication stream's read (``walspark.source._libpq.CopyBoth``) in one call rather than
    three ctypes calls per message: ``PQgetCopyData`` in asynchronous mode until it has nothing
    whole buffered, each message copied and freed at once. ``pgconn``, ``get_copy_data`` and
    ``free_mem`` as for :func:`read_copy_rows`. Returns ``(status, frames)``: ``COPY_MORE``
    (``limit`` read), ``COPY_WAIT`` (nothing more buffered), ``COPY_END`` (``PQgetCopyData``
    -1: the caller fetches the result) or ``COPY_FAILED`` (-2), after the frames read before it.
    """
    cdef void* conn = PyLong_AsVoidPtr(pgconn)
    cdef _GetCopyData get = <_GetCopyData>PyLong_AsVoidPtr(get_copy_data)
    cdef _FreeMem free_ = <_FreeMem>PyLong_AsVoidPtr(free_mem)
    cdef char* buf
    cdef int got
    cdef int status = S_MORE
    cdef list frames = []
    if conn == NULL or <void*>get == NULL or <void*>free_ == NULL:
        raise ValueError("read_copy_frames needs a connection and libpq's PQgetCopyData and PQfreemem")
    if limit < 1:
        raise ValueError("read_copy_frames needs limit >= 1")
    while len(frames) < limit:
        buf = NULL
        got = get(conn, &buf, 1)
        if got > 0:
            try:
                frames.append(PyBytes_FromStringAndSize(buf, got))
            finally:
                free_(buf)
            continue
        if buf != NULL:
            free_(buf)
        status = S_WAIT if got == 0 else S_END if got == -1 else S_FAILED
        break
    return status, frames


def split_copy_buffer(bytes data not None, list ends not None, Py_ssize_t ncols):
    """:func:`read_copy_rows`' splitter on rows already in one buffer (row ``i`` ends at
    ``ends[i]``): for tests, which feed it any bytes. None as :func:`split_copy_rows` returns it."""
    cdef Py_ssize_t n = len(ends), row, start = 0, stop
    cdef const uint8_t* base = <const uint8_t*>PyBytes_AS_STRING(data)
    cdef const uint8_t** rows = <const uint8_t**>PyMem_Malloc(max(n, 1) * sizeof(uint8_t*))
    cdef Py_ssize_t* sizes = <Py_ssize_t*>PyMem_Malloc(max(n, 1) * sizeof(Py_ssize_t))
    try:
        if rows == NULL or sizes == NULL:
            raise MemoryError()
        for row in range(n):
            stop = ends[row]
            if stop < start or stop > PyBytes_GET_SIZE(data):
                raise ValueError("ends must rise within the buffer")
            rows[row], sizes[row] = base + start, stop - start
            start = stop
        return _split_rows(rows, sizes, n, ncols)
    finally:
        PyMem_Free(rows)
        PyMem_Free(sizes)


# --------------------------------------------------------------------------- change rows in C

cdef struct _Row:
    int64_t commit_lsn
    int64_t lsn
    int64_t xid
    int64_t commit_time
    Py_ssize_t new_pos      # offset of the new part in the row's message; -1 none; -2 a Python object
    Py_ssize_t old_pos      # the old (or key) part, likewise
    int32_t seq
    int32_t origin          # index into the builder's origins (0: no origin)
    uint8_t op              # b'I', b'U', b'D', b'T'

cdef enum:
    NO_PART = -1
    OBJECT_PART = -2
    M_TRUNCATE = 84   # 'T'


cdef inline bint _int64(object value, int64_t* out) except -1:
    """``value`` as an int64 when it is an exact int that fits; False otherwise (no error)."""
    cdef int overflow = 0
    cdef long long v
    if not PyLong_CheckExact(value):
        return False
    v = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow:
        return False
    out[0] = v
    return True


cdef inline bint _int32(object value, int32_t* out) except -1:
    cdef int64_t v
    if not _int64(value, &v) or v < -2147483648 or v > 2147483647:
        return False
    out[0] = <int32_t>v
    return True


cdef inline Py_ssize_t _located(object part) except? -3:
    """The offset of a part given as ``(message bytes, offset)`` inside that message; -1 for
    None; -2 for anything else (a TupleData the pure decoder made)."""
    cdef int64_t pos
    if part is None:
        return NO_PART
    if (type(part) is tuple and len(<tuple>part) == 2 and type((<tuple>part)[0]) is bytes
            and _int64((<tuple>part)[1], &pos) and 0 <= pos < PyBytes_GET_SIZE((<tuple>part)[0])):
        return <Py_ssize_t>pos
    return OBJECT_PART


cdef class RowBatch:
    """The change rows of one relation version, kept as C structs until they are built.

    Why: the pure path keeps nine Python lists per relation version and a ``(bytes, offset)``
    tuple per part, one Python call per row. Here a row is one fixed-size struct (the
    transaction's facts, the message's LSN and position, the operation, where its parts
    start) and a reference to its message; :meth:`envelope` turns the structs into Arrow
    buffers column by column, and :meth:`gather` the parts into value buffers. Rows whose
    parts are Python objects (decoded by the pure decoder) are kept aside, and then the
    columns of that part go through the pure path (:meth:`parts`).
    """

    cdef readonly object version
    cdef _Row* rows
    cdef Py_ssize_t n, cap
    cdef list messages      # per row: the message its parts are in (None: none, or objects)
    cdef dict objects       # row -> (new, old) where a part is a Python object

    def __cinit__(self, object version):
        self.version = version
        self.rows = NULL
        self.n = 0
        self.cap = 0
        self.messages = []
        self.objects = {}

    def __dealloc__(self):
        PyMem_Free(self.rows)

    def __len__(self) -> int:
        return self.n

    cdef int _put(self, int64_t commit_lsn, int64_t lsn, int32_t seq, int64_t xid, int64_t commit_time,
                  int32_t origin, uint8_t op, object message, Py_ssize_t new_pos, Py_ssize_t old_pos) except -1:
        cdef Py_ssize_t cap
        cdef _Row* grown
        cdef _Row* row
        if self.n == self.cap:
            cap = self.cap * 2 if self.cap else 1024
            grown = <_Row*>PyMem_Realloc(self.rows, cap * sizeof(_Row))
            if grown == NULL:
                raise MemoryError()
            self.rows, self.cap = grown, cap
        row = &self.rows[self.n]
        row.commit_lsn = commit_lsn
        row.lsn = lsn
        row.seq = seq
        row.xid = xid
        row.commit_time = commit_time
        row.origin = origin
        row.op = op
        row.new_pos = new_pos
        row.old_pos = old_pos
        self.messages.append(message)
        self.n += 1
        return 0

    def add(self, commit_lsn, lsn, seq, xid, commit_time, origin, str op not None, new, old) -> bool:
        """One row from Python (a message the C loop handed back); False, and nothing kept,
        when a number does not fit the row's C fields: the caller then takes the pure path."""
        cdef int64_t c_commit_lsn, c_lsn, c_xid, c_time
        cdef int32_t c_seq, c_origin
        cdef object message = None
        cdef Py_ssize_t new_pos, old_pos
        if not (_int64(commit_lsn, &c_commit_lsn) and _int64(lsn, &c_lsn) and _int32(seq, &c_seq)
                and _int64(xid, &c_xid) and _int64(commit_time, &c_time) and _int32(origin, &c_origin)
                and len(op) == 1 and op in "IUDT"):
            return False
        new_pos = _located(new)
        old_pos = _located(old)
        if new_pos >= 0:
            message = (<tuple>new)[0]
        if old_pos >= 0:
            if message is None:
                message = (<tuple>old)[0]
            elif message is not (<tuple>old)[0]:  # parts of two messages: not a row change's
                old_pos = OBJECT_PART
        if new_pos == OBJECT_PART or old_pos == OBJECT_PART:
            self.objects[self.n] = (new, old)
            new_pos = NO_PART if new is None else OBJECT_PART
            old_pos = NO_PART if old is None else OBJECT_PART
            message = None
        self._put(c_commit_lsn, c_lsn, c_seq, c_xid, c_time, c_origin, ord(op), message, new_pos, old_pos)
        return True

    def envelope(self):
        """The rows' own columns as Arrow buffers (machine byte order, as Arrow's):
        ``(commit_lsn, lsn, seq, xid, commit_time, origin, op_offsets, op_data, max_origin)`` —
        int64, int64, int32, int64, int64 and int32 values; the operation as the offsets and
        data of a string array; the highest origin index (0: no row has an origin)."""
        cdef Py_ssize_t n = self.n, i
        cdef int32_t max_origin = 0
        commit_lsn = PyBytes_FromStringAndSize(NULL, n * 8)
        lsn = PyBytes_FromStringAndSize(NULL, n * 8)
        seq = PyBytes_FromStringAndSize(NULL, n * 4)
        xid = PyBytes_FromStringAndSize(NULL, n * 8)
        commit_time = PyBytes_FromStringAndSize(NULL, n * 8)
        origin = PyBytes_FromStringAndSize(NULL, n * 4)
        op_offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * 4)
        op_data = PyBytes_FromStringAndSize(NULL, n)
        cdef int64_t* c_commit_lsn = <int64_t*>PyBytes_AS_STRING(commit_lsn)
        cdef int64_t* c_lsn = <int64_t*>PyBytes_AS_STRING(lsn)
        cdef int32_t* c_seq = <int32_t*>PyBytes_AS_STRING(seq)
        cdef int64_t* c_xid = <int64_t*>PyBytes_AS_STRING(xid)
        cdef int64_t* c_time = <int64_t*>PyBytes_AS_STRING(commit_time)
        cdef int32_t* c_origin = <int32_t*>PyBytes_AS_STRING(origin)
        cdef int32_t* c_offsets = <int32_t*>PyBytes_AS_STRING(op_offsets)
        cdef char* c_op = PyBytes_AS_STRING(op_data)
        cdef _Row* row
        for i in range(n):
            row = &self.rows[i]
            c_commit_lsn[i] = row.commit_lsn
            c_lsn[i] = row.lsn
            c_seq[i] = row.seq
            c_xid[i] = row.xid
            c_time[i] = row.commit_time
            c_origin[i] = row.origin
            if row.origin > max_origin:
                max_origin = row.origin
            c_offsets[i] = <int32_t>i
            c_op[i] = <char>row.op
        c_offsets[n] = <int32_t>n
        return (commit_lsn, lsn, seq, xid, commit_time, origin, op_offsets, op_data, max_origin)

    cdef Py_ssize_t* _positions(self, bint new) except NULL:
        """The offsets of one part of every row, in a fresh array the caller frees."""
        cdef Py_ssize_t i
        cdef Py_ssize_t* out = <Py_ssize_t*>PyMem_Malloc(max(self.n, 1) * sizeof(Py_ssize_t))
        if out == NULL:
            raise MemoryError()
        for i in range(self.n):
            out[i] = self.rows[i].new_pos if new else self.rows[i].old_pos
        return out

    def absent(self, bint new) -> bytes:
        """The rows without that part (new or old), as the data of an Arrow boolean array."""
        cdef Py_ssize_t i, pos
        out = PyBytes_FromStringAndSize(NULL, (self.n + 7) >> 3)
        cdef char* bits = PyBytes_AS_STRING(out)
        memset(bits, 0, (self.n + 7) >> 3)
        for i in range(self.n):
            pos = self.rows[i].new_pos if new else self.rows[i].old_pos
            if pos == NO_PART:
                _set_bit(bits, i)
        return out

    def gather(self, bint new, Py_ssize_t ncols):
        """That part of every row, column by column, as :func:`gather_columns` returns it; None
        where a row holds it as a Python object or a part does not fit (the pure path decides)."""
        cdef Py_ssize_t i
        cdef Py_ssize_t* positions
        cdef object out
        positions = self._positions(new)
        try:
            for i in range(self.n):
                if positions[i] == OBJECT_PART:
                    return None
            out = _gather(self.messages, positions, self.n, ncols)
        finally:
            PyMem_Free(positions)
        return out

    def parts(self, bint new) -> list:
        """That part of every row as the pure path takes it: None, ``(message, offset)`` or the object."""
        cdef Py_ssize_t i, pos
        cdef list out = []
        for i in range(self.n):
            pos = self.rows[i].new_pos if new else self.rows[i].old_pos
            if pos == NO_PART:
                out.append(None)
            elif pos == OBJECT_PART:
                out.append(self.objects[i][0 if new else 1])
            else:
                out.append((self.messages[i], pos))
        return out

    def columns(self) -> tuple:
        """The rows' own columns as Python lists: ``(commit_lsn, lsn, seq, xid, commit_time,
        origin, op)`` (the origin as an index), for a builder that goes back to the pure path."""
        cdef Py_ssize_t i
        cdef _Row* row
        out = ([], [], [], [], [], [], [])
        for i in range(self.n):
            row = &self.rows[i]
            out[0].append(row.commit_lsn)
            out[1].append(row.lsn)
            out[2].append(row.seq)
            out[3].append(row.xid)
            out[4].append(row.commit_time)
            out[5].append(row.origin)
            out[6].append(chr(row.op))
        return out


def add_row_changes(dict batches not None, object messages, bint numbered, int protocol_version,
                    int64_t commit_lsn, int64_t xid, int64_t commit_time, int32_t origin, Py_ssize_t seq):
    """The message loop of ``ChangeRowBuilder.add``: take messages while they are valid row changes
    of a relation in ``batches``, and stop at the first one that is anything else.

    ``batches`` maps a relation id to the :class:`RowBatch` of the version in force; ``messages``
    is an iterator of ``(seq, lsn, in_stream, data)`` (``numbered``) or ``(lsn, in_stream, data)``
    items, the latter numbered from ``seq``. The facts are the transaction's, the commit time
    already in Unix microseconds.

    Returns ``(rows added, seq, item)``: ``item`` is the message left to the caller (with its
    position ``seq`` when not numbered) — a Relation, a Truncate, a row change of a relation not
    in ``batches``, anything the scan refuses, anything of another shape — or None when the
    iterator is exhausted. The caller handles it as the pure path does and calls again.
    """
    cdef Py_ssize_t added = 0, size
    cdef object item, data, lsn_obj, in_stream_obj, found
    cdef int64_t lsn
    cdef int32_t row_seq
    cdef bint in_stream
    cdef _Scan head
    cdef uint32_t last_relation = 0
    cdef RowBatch batch = None
    for item in messages:
        if type(item) is not tuple:
            return added, seq, item
        size = len(<tuple>item)
        if numbered:
            if size != 4 or not _int32((<tuple>item)[0], &row_seq):
                return added, seq, item
            lsn_obj, in_stream_obj, data = (<tuple>item)[1], (<tuple>item)[2], (<tuple>item)[3]
        else:
            if size != 3 or seq > 2147483647:
                return added, seq, item
            row_seq = <int32_t>seq
            lsn_obj, in_stream_obj, data = (<tuple>item)[0], (<tuple>item)[1], (<tuple>item)[2]
        if type(data) is not bytes or not _int64(lsn_obj, &lsn):
            return added, seq, item
        if in_stream_obj is True:
            in_stream = True
        elif in_stream_obj is False:
            in_stream = False
        else:
            return added, seq, item
        if in_stream and protocol_version < 2:
            return added, seq, item
        if not _scan(<const uint8_t*>PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), in_stream, &head):
            return added, seq, item
        if batch is None or head.relation_id != last_relation:
            found = batches.get(head.relation_id)
            if found is None or type(found) is not RowBatch:
                return added, seq, item
            batch, last_relation = <RowBatch>found, head.relation_id
        batch._put(commit_lsn, lsn, row_seq, xid, commit_time, origin, head.kind, data, head.new_pos,
                   head.old_pos if head.old_pos >= 0 else head.key_pos)
        added += 1
        seq += 1
    return added, seq, None


# --------------------------------------------------------------------------- fixed-width binary values

cdef inline bint _little_endian() noexcept nogil:
    cdef uint32_t one = 1
    return (<uint8_t*>&one)[0] == 1


cdef class _BinaryBuffers:
    """The buffers of an Arrow binary array (validity, offsets, data: any objects with the buffer
    protocol; validity may be None), held for as long as this object lives."""

    cdef Py_buffer views[3]
    cdef int held
    cdef const uint8_t* valid      # NULL: no validity bitmap (no NULL)
    cdef const uint8_t* offsets
    cdef const uint8_t* data
    cdef Py_ssize_t valid_len, offsets_len, data_len

    def __cinit__(self, object validity, object offsets not None, object data not None):
        self.held = 0
        self.valid, self.valid_len = NULL, 0
        PyObject_GetBuffer(offsets, &self.views[0], PyBUF_SIMPLE)
        self.held = 1
        PyObject_GetBuffer(data, &self.views[1], PyBUF_SIMPLE)
        self.held = 2
        self.offsets, self.offsets_len = <const uint8_t*>self.views[0].buf, self.views[0].len
        self.data, self.data_len = <const uint8_t*>self.views[1].buf, self.views[1].len
        if validity is not None:
            PyObject_GetBuffer(validity, &self.views[2], PyBUF_SIMPLE)
            self.held = 3
            self.valid, self.valid_len = <const uint8_t*>self.views[2].buf, self.views[2].len

    def __dealloc__(self):
        cdef int i
        for i in range(self.held):
            PyBuffer_Release(&self.views[i])


def fixed_width(object validity, object offsets not None, object data not None, Py_ssize_t n, Py_ssize_t size,
                bint floating):
    """An Arrow binary array of big-endian fixed-size values (int2/4/8, float4/8, and the
    counts of date and timestamp) as the data buffer of a fixed-width Arrow array: each value
    byte-swapped into place (zeros where the row is NULL), with no Python object per value.

    ``validity`` (None: no NULL), ``offsets`` and ``data`` are the binary array's buffers (any
    object with the buffer protocol), from its first row. None — and the caller's per-value
    path decides — when a present value is not ``size`` bytes, an offset points outside
    ``data``, a buffer is shorter than ``n`` rows need, or (``floating``) a value is a
    signalling NaN, which a trip through Python's float may quieten.
    """
    if size not in (1, 2, 4, 8) or n < 0:
        return None
    return _fixed_width(_BinaryBuffers(validity, offsets, data), n, size, floating)


cdef object _fixed_width(_BinaryBuffers buffers, Py_ssize_t n, Py_ssize_t size, bint floating):
    """:func:`fixed_width` on the buffers held."""
    cdef const uint8_t* valid = buffers.valid
    cdef const uint8_t* offsets = buffers.offsets
    cdef const uint8_t* data = buffers.data
    cdef Py_ssize_t valid_len = buffers.valid_len, offsets_len = buffers.offsets_len, have = buffers.data_len
    cdef bint little = _little_endian()
    cdef Py_ssize_t i, b
    cdef int32_t start, end
    cdef const uint8_t* src
    cdef uint8_t* dst
    cdef uint64_t bits
    if offsets_len < (n + 1) * 4 or (valid != NULL and valid_len < (n + 7) >> 3):
        return None
    out = PyBytes_FromStringAndSize(NULL, n * size)
    dst = <uint8_t*>PyBytes_AS_STRING(out)
    for i in range(n):
        if valid != NULL and not (valid[i >> 3] >> (i & 7)) & 1:
            memset(dst + i * size, 0, size)
            continue
        memcpy(&start, offsets + i * 4, 4)
        memcpy(&end, offsets + (i + 1) * 4, 4)
        if start < 0 or <int64_t>end - <int64_t>start != size or end > have:
            return None
        src = data + start
        if floating:
            bits = 0
            for b in range(size):
                bits = (bits << 8) | src[b]
            if size == 4 and (bits & 0x7f800000) == 0x7f800000 and (bits & 0x7fffff) and not (bits & 0x400000):
                return None
            if (size == 8 and (bits & 0x7ff0000000000000) == 0x7ff0000000000000 and (bits & 0xfffffffffffff)
                    and not (bits & 0x8000000000000)):
                return None
        if little:
            for b in range(size):
                dst[i * size + b] = src[size - 1 - b]
        else:
            memcpy(dst + i * size, src, size)
    return out


# --------------------------------------------------------------------------- numeric to decimal128

cdef extern from *:
    ctypedef unsigned long long _u128 "unsigned __int128"
    ctypedef long long _i128 "__int128"

cdef enum:
    N_POS = 0x0000
    N_NEG = 0x4000


def numeric_decimal128(object validity, object offsets not None, object data not None, Py_ssize_t n,
                       int precision, int scale):
    """An Arrow binary array of numeric_send values as the data buffer of an Arrow
    ``decimal128(precision, scale)`` array: each value's base-10000 digits summed into its
    unscaled 128-bit integer in C, with no Decimal object per value (zeros where NULL).

    The buffers are those of :func:`fixed_width`. None — and the caller's per-value path
    decides, raising its precise error or applying the column's policy — for anything but a
    plain finite value that fits exactly: NaN or ±Infinity, a header or digit numeric_send never
    sends, a non-zero digit past the value's dscale or the column's scale, more than
    ``precision`` digits, a buffer shorter than ``n`` rows need; and on a big-endian machine.
    """
    if not _little_endian() or n < 0 or not 0 <= scale <= precision <= 38:
        return None
    return _numeric_decimal128(_BinaryBuffers(validity, offsets, data), n, precision, scale)


cdef inline int _i16(const uint8_t* p) noexcept nogil:
    return <int>(<int16_t>((<uint16_t>p[0] << 8) | <uint16_t>p[1]))


cdef object _numeric_decimal128(_BinaryBuffers buffers, Py_ssize_t n, int precision, int scale):
    """:func:`numeric_decimal128` on the buffers held."""
    cdef const uint8_t* valid = buffers.valid
    cdef const uint8_t* offsets = buffers.offsets
    cdef const uint8_t* data = buffers.data
    cdef Py_ssize_t valid_len = buffers.valid_len, offsets_len = buffers.offsets_len, have = buffers.data_len
    cdef _u128 pow10[39]
    cdef _u128 limit, acc, term
    cdef _i128 value
    cdef Py_ssize_t i, j
    cdef int32_t start, end
    cdef const uint8_t* src
    cdef int ndigits, weight, sign, dscale, digit, e, cut, k
    cdef uint8_t* dst
    pow10[0] = 1
    for k in range(1, 39):
        pow10[k] = pow10[k - 1] * 10
    limit = pow10[precision]
    if offsets_len < (n + 1) * 4 or (valid != NULL and valid_len < (n + 7) >> 3):
        return None
    out = PyBytes_FromStringAndSize(NULL, n * 16)
    dst = <uint8_t*>PyBytes_AS_STRING(out)
    for i in range(n):
        if valid != NULL and not (valid[i >> 3] >> (i & 7)) & 1:
            memset(dst + i * 16, 0, 16)
            continue
        memcpy(&start, offsets + i * 4, 4)
        memcpy(&end, offsets + (i + 1) * 4, 4)
        if start < 0 or end > have or <int64_t>end - <int64_t>start < 8:
            return None
        src = data + start
        ndigits, weight, sign, dscale = _i16(src), _i16(src + 2), (src[4] << 8) | src[5], _i16(src + 6)
        if (sign != N_POS and sign != N_NEG) or ndigits < 0 or dscale < 0:
            return None  # NaN, ±Infinity, or a header the reference refuses
        if <int64_t>end - <int64_t>start != 8 + 2 * <int64_t>ndigits:
            return None
        acc = 0
        for j in range(ndigits):
            digit = _i16(src + 8 + 2 * j)
            if not 0 <= digit < 10000:
                return None
            if digit == 0:
                continue
            # Digit j counts 10000**(weight - j): 10**(4 * (weight - j)) of the value, 10**e of the
            # unscaled integer. Below the value's dscale or the column's scale it must be zero.
            e = 4 * (weight - j) + dscale
            if e < 0:
                cut = -e
                if cut >= 4 or digit % <int>pow10[cut]:
                    return None
            e = 4 * (weight - j) + scale
            if e < 0:
                cut = -e
                if cut >= 4 or digit % <int>pow10[cut]:
                    return None
                term = <_u128>(digit // <int>pow10[cut])
            elif e > 38:
                return None
            else:
                if <_u128>digit > limit // pow10[e]:
                    return None
                term = <_u128>digit * pow10[e]
            acc += term
            if acc >= limit:
                return None
        if acc == 0 and dscale == 0 and precision == scale:
            return None  # the reference counts such a zero ("0") as one digit before the point
        value = <_i128>acc
        if sign == N_NEG:
            value = -value
        memcpy(dst + i * 16, &value, 16)
    return out
