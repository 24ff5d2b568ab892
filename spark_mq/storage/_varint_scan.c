/* Decoding varint record bodies (Kafka's v2 record layout) in one pass over a fetch.
 *
 * The optional C half of spark_mq/storage/varint_records.py, which documents the layout (and
 * docs/format.md, "Varint body"), holds the pure-Python fallback that gives identical results,
 * and builds Arrow arrays from the buffers returned here.
 *
 * scan() walks the batches of a buffer from a position and decodes every uncompressed data
 * batch with a varint body into one set of column buffers, so that a fetch of thousands of
 * one-record batches costs one call instead of a Python loop per batch. It stops, before the
 * batch, at the first batch it does not take: a partial trailing batch, a corrupt batch (any
 * check of validate_batch or of the body fails), an Arrow or compressed body, a control batch,
 * a transactional batch when asked (read_committed filtering is done by the caller), or a
 * batch at or past end_offset. The caller handles that batch the slow way, which raises the
 * precise error for a corrupt one: this file never builds an error message for bad data.
 * parse_body() decodes one (decompressed) varint body. encode_records() writes the varint body
 * of a producer's small batch from its record lists (a record at a time in Python costs more
 * than the rest of the batch's encoding).
 *
 * Memory: the output buffers grow with what was decoded, which is bounded by the input's size
 * (every length is checked against the bytes that remain before anything is copied), so a
 * hostile length never allocates more than the input.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>
#define HAVE_SSE42_PATH 1
#endif

/* ---- CRC-32C (Castagnoli), as the crc32c package computes it ---------------------------- */

static uint32_t crc_table[8][256];
static int use_sse42 = 0;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
#ifdef HAVE_SSE42_PATH
    __builtin_cpu_init();
    use_sse42 = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t crc_soft(uint32_t crc, const uint8_t *p, Py_ssize_t n) {
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        v ^= crc; /* little-endian hosts only (x86-64, ARMv8), like the rest of the project */
        crc = crc_table[7][v & 0xff] ^ crc_table[6][(v >> 8) & 0xff] ^
              crc_table[5][(v >> 16) & 0xff] ^ crc_table[4][(v >> 24) & 0xff] ^
              crc_table[3][(v >> 32) & 0xff] ^ crc_table[2][(v >> 40) & 0xff] ^
              crc_table[1][(v >> 48) & 0xff] ^ crc_table[0][v >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xff];
    return crc;
}

#ifdef HAVE_SSE42_PATH
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const uint8_t *p,
                                                         Py_ssize_t n) {
    uint64_t c = crc;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = _mm_crc32_u8(c32, *p++);
    return c32;
}
#endif

static uint32_t crc32c(const uint8_t *p, Py_ssize_t n) {
#ifdef HAVE_SSE42_PATH
    if (use_sse42) return ~crc_hw(0xFFFFFFFFu, p, n);
#endif
    return ~crc_soft(0xFFFFFFFFu, p, n);
}

/* ---- growable output buffers ------------------------------------------------------------ */

typedef struct {
    char *p;
    Py_ssize_t len, cap;
} Buf;

/* The buffers grow while the GIL is released (the scan runs without it), so they use the raw
 * allocator, which is thread-safe without the GIL; PyMem_Realloc is not (pymalloc's arenas are
 * shared by every thread) and corrupted the heap under concurrent fetches. No Python error is
 * set here either: callers report MemoryError once they hold the GIL again. */
static int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + extra) cap *= 2;
    char *p = PyMem_RawRealloc(b->p, (size_t)cap);
    if (p == NULL) {
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const void *data, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    memcpy(b->p + b->len, data, (size_t)n);
    b->len += n;
    return 0;
}

/* The columns decoded so far. Validity is one byte per entry here, packed into Arrow's
 * bitmaps only when the buffers are handed out. */
enum {
    B_OFFSET, B_TIMESTAMP, B_TS_TYPE,
    B_KEY_VALID, B_KEY_OFFSETS, B_KEY_DATA,
    B_VALUE_VALID, B_VALUE_OFFSETS, B_VALUE_DATA,
    B_HEADERS_VALID, B_HEADERS_OFFSETS,
    B_HKEY_OFFSETS, B_HKEY_DATA,
    B_HVALUE_VALID, B_HVALUE_OFFSETS, B_HVALUE_DATA,
    B_COUNT
};

typedef struct {
    Buf b[B_COUNT];
    Py_ssize_t rows, headers;
} Out;

typedef struct {
    Py_ssize_t len[B_COUNT];
    Py_ssize_t rows, headers;
} Mark;

static void out_mark(const Out *o, Mark *m) {
    for (int i = 0; i < B_COUNT; i++) m->len[i] = o->b[i].len;
    m->rows = o->rows;
    m->headers = o->headers;
}

static void out_reset(Out *o, const Mark *m) {
    for (int i = 0; i < B_COUNT; i++) o->b[i].len = m->len[i];
    o->rows = m->rows;
    o->headers = m->headers;
}

static void out_free(Out *o) {
    for (int i = 0; i < B_COUNT; i++) PyMem_RawFree(o->b[i].p);
}

static int out_init(Out *o) {
    memset(o, 0, sizeof(*o));
    int32_t zero = 0;
    /* Every offsets buffer starts with its leading 0. */
    if (buf_put(&o->b[B_KEY_OFFSETS], &zero, 4) < 0 || buf_put(&o->b[B_VALUE_OFFSETS], &zero, 4) < 0 ||
        buf_put(&o->b[B_HEADERS_OFFSETS], &zero, 4) < 0 || buf_put(&o->b[B_HKEY_OFFSETS], &zero, 4) < 0 ||
        buf_put(&o->b[B_HVALUE_OFFSETS], &zero, 4) < 0) {
        out_free(o);
        return -1;
    }
    return 0;
}

/* ---- reading ---------------------------------------------------------------------------- */

#define CORRUPT (-1)
#define NOMEM (-2)

static int read_varint32(const uint8_t *p, Py_ssize_t lim, Py_ssize_t *cur, int32_t *out) {
    uint32_t u = 0;
    for (int i = 0; i < 5; i++) {
        if (*cur >= lim) return CORRUPT;
        uint8_t b = p[(*cur)++];
        if (i == 4 && b > 0x0F) return CORRUPT; /* longer than 32 bits */
        u |= (uint32_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) {
            *out = (int32_t)((u >> 1) ^ (0u - (u & 1u)));
            return 0;
        }
    }
    return CORRUPT;
}

static int read_varint64(const uint8_t *p, Py_ssize_t lim, Py_ssize_t *cur, int64_t *out) {
    uint64_t u = 0;
    for (int i = 0; i < 10; i++) {
        if (*cur >= lim) return CORRUPT;
        uint8_t b = p[(*cur)++];
        if (i == 9 && b > 0x01) return CORRUPT; /* longer than 64 bits */
        u |= (uint64_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) {
            *out = (int64_t)((u >> 1) ^ (0u - (u & 1u)));
            return 0;
        }
    }
    return CORRUPT;
}

/* Strict UTF-8 (no overlong forms, surrogates or code points past U+10FFFF), as Arrow's
 * string validation and Python's decoder check it. */
static int utf8_valid(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int need;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (i + need >= n) return 0; /* truncated sequence */
        for (int k = 1; k <= need; k++) {
            uint8_t d = s[i + k];
            if ((d & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (d & 0x3F);
        }
        if ((need == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += need + 1;
    }
    return 1;
}

/* Append a binary entry (len -1: null) to a column of three buffers. */
static int put_binary(Out *o, int valid_i, int offsets_i, int data_i, const uint8_t *data,
                      int32_t len) {
    uint8_t valid = len >= 0;
    if (buf_put(&o->b[valid_i], &valid, 1) < 0) return NOMEM;
    if (len > 0) {
        if (o->b[data_i].len + len > INT32_MAX) return CORRUPT; /* caller stops the run here */
        if (buf_put(&o->b[data_i], data, len) < 0) return NOMEM;
    }
    int32_t end = (int32_t)o->b[data_i].len;
    if (buf_put(&o->b[offsets_i], &end, 4) < 0) return NOMEM;
    return 0;
}

/* The records of one body: validate all of them, append those within [start, end). */
static int parse_records(const uint8_t *p, Py_ssize_t len, int32_t count, int32_t last_delta,
                         int64_t base_offset, int64_t base_ts, int64_t max_ts, int log_append,
                         int64_t start, int64_t end, Out *o) {
    Py_ssize_t cur = 0;
    int64_t prev_delta = -1;
    int8_t ts_type = (int8_t)(log_append ? 1 : 0);
    /* A record takes at least 7 bytes: a count past that is corrupt before any allocation. */
    if ((int64_t)count * 7 > (int64_t)len) return CORRUPT;
    for (int32_t r = 0; r < count; r++) {
        int32_t rec_len, offset_delta, key_len, value_len, header_count;
        int64_t ts_delta, ts;
        if (read_varint32(p, len, &cur, &rec_len) < 0 || rec_len < 0 || rec_len > len - cur)
            return CORRUPT;
        Py_ssize_t rec_end = cur + rec_len;
        if (cur >= rec_end) return CORRUPT;
        uint8_t attrs = p[cur++];
        if (attrs & ~0x01) return CORRUPT;
        if (read_varint64(p, rec_end, &cur, &ts_delta) < 0) return CORRUPT;
        if (read_varint32(p, rec_end, &cur, &offset_delta) < 0) return CORRUPT;
        if (offset_delta <= prev_delta || offset_delta > last_delta) return CORRUPT;
        prev_delta = offset_delta;
        if (__builtin_add_overflow(base_ts, ts_delta, &ts)) return CORRUPT;
        if (read_varint32(p, rec_end, &cur, &key_len) < 0 || key_len < -1 || key_len > rec_end - cur)
            return CORRUPT;
        const uint8_t *key = p + cur;
        if (key_len > 0) cur += key_len;
        if (read_varint32(p, rec_end, &cur, &value_len) < 0 || value_len < -1 ||
            value_len > rec_end - cur)
            return CORRUPT;
        const uint8_t *value = p + cur;
        if (value_len > 0) cur += value_len;
        if (read_varint32(p, rec_end, &cur, &header_count) < 0 || header_count < 0 ||
            header_count > (rec_end - cur) / 2 || ((attrs & 0x01) && header_count != 0))
            return CORRUPT;
        int64_t offset = base_offset + offset_delta;
        int keep = offset >= start && offset < end;
        for (int32_t h = 0; h < header_count; h++) {
            int32_t hk_len, hv_len;
            if (read_varint32(p, rec_end, &cur, &hk_len) < 0 || hk_len < 0 || hk_len > rec_end - cur)
                return CORRUPT;
            const uint8_t *hk = p + cur;
            cur += hk_len;
            if (!utf8_valid(hk, hk_len)) return CORRUPT;
            if (read_varint32(p, rec_end, &cur, &hv_len) < 0 || hv_len < -1 || hv_len > rec_end - cur)
                return CORRUPT;
            const uint8_t *hv = p + cur;
            if (hv_len > 0) cur += hv_len;
            if (keep) {
                int rc;
                if (o->b[B_HKEY_DATA].len + hk_len > INT32_MAX) return CORRUPT;
                if (buf_put(&o->b[B_HKEY_DATA], hk, hk_len) < 0) return NOMEM;
                int32_t hk_end = (int32_t)o->b[B_HKEY_DATA].len;
                if (buf_put(&o->b[B_HKEY_OFFSETS], &hk_end, 4) < 0) return NOMEM;
                rc = put_binary(o, B_HVALUE_VALID, B_HVALUE_OFFSETS, B_HVALUE_DATA, hv, hv_len);
                if (rc < 0) return rc;
                o->headers++;
            }
        }
        if (cur != rec_end) return CORRUPT; /* the record's length must be exact */
        if (!keep) continue;
        if (log_append) ts = max_ts;
        int rc;
        if (buf_put(&o->b[B_OFFSET], &offset, 8) < 0 || buf_put(&o->b[B_TIMESTAMP], &ts, 8) < 0 ||
            buf_put(&o->b[B_TS_TYPE], &ts_type, 1) < 0)
            return NOMEM;
        if ((rc = put_binary(o, B_KEY_VALID, B_KEY_OFFSETS, B_KEY_DATA, key, key_len)) < 0) return rc;
        if ((rc = put_binary(o, B_VALUE_VALID, B_VALUE_OFFSETS, B_VALUE_DATA, value, value_len)) < 0)
            return rc;
        uint8_t hvalid = !(attrs & 0x01);
        if (o->headers > INT32_MAX) return CORRUPT;
        int32_t hend = (int32_t)o->headers;
        if (buf_put(&o->b[B_HEADERS_VALID], &hvalid, 1) < 0 ||
            buf_put(&o->b[B_HEADERS_OFFSETS], &hend, 4) < 0)
            return NOMEM;
        o->rows++;
    }
    if (cur != len) return CORRUPT; /* no bytes after the last record */
    return 0;
}

/* ---- handing the buffers out ------------------------------------------------------------ */

static PyObject *packed_validity(const Buf *b, Py_ssize_t n, Py_ssize_t *nulls) {
    *nulls = 0;
    for (Py_ssize_t i = 0; i < n; i++) *nulls += !b->p[i];
    if (*nulls == 0) Py_RETURN_NONE;
    PyObject *bits = PyBytes_FromStringAndSize(NULL, (n + 7) / 8);
    if (bits == NULL) return NULL;
    uint8_t *q = (uint8_t *)PyBytes_AS_STRING(bits);
    memset(q, 0, (size_t)((n + 7) / 8));
    for (Py_ssize_t i = 0; i < n; i++)
        if (b->p[i]) q[i >> 3] |= (uint8_t)(1u << (i & 7));
    return bits;
}

static PyObject *bytes_of(const Buf *b) {
    return PyBytes_FromStringAndSize(b->p ? b->p : "", b->len);
}

/* (rows, headers, offsets, timestamps, ts_types, key_validity, key_nulls, key_offsets, key_data,
 *  value_validity, value_nulls, value_offsets, value_data, headers_validity, headers_nulls,
 *  headers_offsets, hkey_offsets, hkey_data, hvalue_validity, hvalue_nulls, hvalue_offsets,
 *  hvalue_data); a validity is None when nothing is null. */
static PyObject *out_result(Out *o) {
    Py_ssize_t kn, vn, hn, hvn;
    PyObject *kv = packed_validity(&o->b[B_KEY_VALID], o->rows, &kn);
    PyObject *vv = packed_validity(&o->b[B_VALUE_VALID], o->rows, &vn);
    PyObject *hv = packed_validity(&o->b[B_HEADERS_VALID], o->rows, &hn);
    PyObject *hvv = packed_validity(&o->b[B_HVALUE_VALID], o->headers, &hvn);
    PyObject *res = NULL;
    if (kv && vv && hv && hvv) {
        res = Py_BuildValue(
            "(nnNNNOnNNOnNNOnNNNOnNN)", o->rows, o->headers, bytes_of(&o->b[B_OFFSET]),
            bytes_of(&o->b[B_TIMESTAMP]), bytes_of(&o->b[B_TS_TYPE]), kv, kn,
            bytes_of(&o->b[B_KEY_OFFSETS]), bytes_of(&o->b[B_KEY_DATA]), vv, vn,
            bytes_of(&o->b[B_VALUE_OFFSETS]), bytes_of(&o->b[B_VALUE_DATA]), hv, hn,
            bytes_of(&o->b[B_HEADERS_OFFSETS]), bytes_of(&o->b[B_HKEY_OFFSETS]),
            bytes_of(&o->b[B_HKEY_DATA]), hvv, hvn, bytes_of(&o->b[B_HVALUE_OFFSETS]),
            bytes_of(&o->b[B_HVALUE_DATA]));
    }
    Py_XDECREF(kv);
    Py_XDECREF(vv);
    Py_XDECREF(hv);
    Py_XDECREF(hvv);
    return res;
}

/* ---- batch headers ---------------------------------------------------------------------- */

static int64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | p[i];
    return (int64_t)v;
}
static int32_t be32(const uint8_t *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}
static int16_t be16(const uint8_t *p) { return (int16_t)(((uint16_t)p[0] << 8) | p[1]); }

#define HEADER_SIZE 61
#define MAGIC 83
#define ATTR_CODEC 0x07
#define ATTR_LOG_APPEND 0x08
#define ATTR_TRANSACTIONAL 0x10
#define ATTR_CONTROL 0x20
#define ATTR_VARINT 0x40
#define ATTR_KNOWN 0x7F

/* Why scan() stopped. */
#define STOP_END 0      /* the buffer ends, or a partial batch follows: the normal end */
#define STOP_BATCH 1    /* a batch the caller handles (any other kind, or corrupt) */

/* A binary entry of a decoded column as a Python object: bytes, or None when null. */
static PyObject *binary_at(const Out *o, int valid_i, int offsets_i, int data_i, Py_ssize_t i) {
    if (!o->b[valid_i].p[i]) Py_RETURN_NONE;
    const int32_t *offsets = (const int32_t *)o->b[offsets_i].p;
    return PyBytes_FromStringAndSize(o->b[data_i].p + offsets[i], offsets[i + 1] - offsets[i]);
}

/* The decoded rows as records of ``record_type`` (a tuple subclass of 8 fields: topic,
 * partition, offset, timestamp, timestamp type, key, value, headers), what a consumer's
 * poll() returns, built here instead of through Arrow arrays and back: for the few records of
 * a low-latency fetch that round trip costs several times the decoding. Headers are a tuple of
 * (key str, value bytes or None) pairs, () when the record has none. */
static PyObject *out_rows(const Out *o, PyTypeObject *record_type, PyObject *topic,
                          PyObject *partition) {
    PyObject *rows = PyList_New(o->rows);
    if (rows == NULL) return NULL;
    const int64_t *offsets = (const int64_t *)o->b[B_OFFSET].p;
    const int64_t *stamps = (const int64_t *)o->b[B_TIMESTAMP].p;
    const int8_t *ts_types = (const int8_t *)o->b[B_TS_TYPE].p;
    const int32_t *hoffsets = (const int32_t *)o->b[B_HEADERS_OFFSETS].p;
    const int32_t *hk_offsets = (const int32_t *)o->b[B_HKEY_OFFSETS].p;
    for (Py_ssize_t i = 0; i < o->rows; i++) {
        PyObject *fields[8] = {NULL};
        Py_INCREF(topic);
        fields[0] = topic;
        Py_INCREF(partition);
        fields[1] = partition;
        fields[2] = PyLong_FromLongLong(offsets[i]);
        fields[3] = PyLong_FromLongLong(stamps[i]);
        fields[4] = PyLong_FromLong(ts_types[i]);
        fields[5] = binary_at(o, B_KEY_VALID, B_KEY_OFFSETS, B_KEY_DATA, i);
        fields[6] = binary_at(o, B_VALUE_VALID, B_VALUE_OFFSETS, B_VALUE_DATA, i);
        int32_t h0 = hoffsets[i], h1 = hoffsets[i + 1];
        fields[7] = PyTuple_New(h1 - h0);
        if (fields[7] != NULL) {
            for (int32_t h = h0; h < h1; h++) {
                PyObject *key = PyUnicode_DecodeUTF8(o->b[B_HKEY_DATA].p + hk_offsets[h],
                                                     hk_offsets[h + 1] - hk_offsets[h], "strict");
                PyObject *value = binary_at(o, B_HVALUE_VALID, B_HVALUE_OFFSETS, B_HVALUE_DATA, h);
                PyObject *pair = key && value ? PyTuple_Pack(2, key, value) : NULL;
                Py_XDECREF(key);
                Py_XDECREF(value);
                if (pair == NULL) {
                    Py_CLEAR(fields[7]);
                    break;
                }
                PyTuple_SET_ITEM(fields[7], h - h0, pair);
            }
        }
        PyObject *record = NULL;
        int ok = 1;
        for (int f = 0; f < 8; f++) ok &= fields[f] != NULL;
        if (ok) record = record_type->tp_alloc(record_type, 8);
        if (record == NULL) {
            for (int f = 0; f < 8; f++) Py_XDECREF(fields[f]);
            Py_DECREF(rows);
            return NULL;
        }
        for (int f = 0; f < 8; f++) PyTuple_SET_ITEM(record, f, fields[f]);
        PyList_SET_ITEM(rows, i, record);
    }
    return rows;
}

static PyObject *scan_impl(PyObject *args, int as_rows);

static PyObject *scan(PyObject *self, PyObject *args) { return scan_impl(args, 0); }

static PyObject *scan_rows(PyObject *self, PyObject *args) { return scan_impl(args, 1); }

static PyObject *scan_impl(PyObject *args, int as_rows) {
    Py_buffer view;
    Py_ssize_t pos;
    long long start, end;
    int verify_crc, stop_at_txn;
    PyTypeObject *record_type = NULL;
    PyObject *topic = NULL, *partition = NULL;
    if (as_rows) {
        if (!PyArg_ParseTuple(args, "y*nLLppO!OO", &view, &pos, &start, &end, &verify_crc,
                              &stop_at_txn, &PyType_Type, &record_type, &topic, &partition))
            return NULL;
        if (!PyType_IsSubtype(record_type, &PyTuple_Type)) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_TypeError, "scan_rows: the record type must be a tuple type");
            return NULL;
        }
    } else if (!PyArg_ParseTuple(args, "y*nLLpp", &view, &pos, &start, &end, &verify_crc,
                                 &stop_at_txn)) {
        return NULL;
    }
    const uint8_t *buf = view.buf;
    Py_ssize_t size_all = view.len;
    Out o;
    if (out_init(&o) < 0) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    int reason = STOP_END;
    int failed = 0;
    Py_BEGIN_ALLOW_THREADS
    while (pos < size_all) {
        if (size_all - pos < 12) break;
        int64_t size = (int64_t)be32(buf + pos + 8) + 12;
        if (size > size_all - pos) break; /* partial trailing batch */
        reason = STOP_BATCH;
        if (size < HEADER_SIZE || buf[pos + 16] != MAGIC) break;
        const uint8_t *h = buf + pos;
        int16_t attrs = be16(h + 21);
        int32_t last_delta = be32(h + 23);
        int32_t count = be32(h + 57);
        if (verify_crc && crc32c(h + 21, (Py_ssize_t)size - 21) != (uint32_t)be32(h + 17)) break;
        if ((attrs & ~ATTR_KNOWN) || (attrs & ATTR_CODEC) > 4) break;
        if (count < 0 || last_delta < -1 || (int64_t)count > (int64_t)last_delta + 1) break;
        if ((attrs & ATTR_CONTROL) || (attrs & ATTR_CODEC) || !(attrs & ATTR_VARINT)) break;
        if (stop_at_txn && (attrs & ATTR_TRANSACTIONAL)) break;
        int64_t base_offset = be64(h);
        if (base_offset >= end) break;
        reason = STOP_END;
        if (count > 0 && base_offset + last_delta >= start) {
            Mark m;
            out_mark(&o, &m);
            int rc = parse_records(h + HEADER_SIZE, (Py_ssize_t)size - HEADER_SIZE, count, last_delta,
                                   base_offset, be64(h + 27), be64(h + 35), attrs & ATTR_LOG_APPEND,
                                   start, end, &o);
            if (rc == NOMEM) {
                failed = 1;
                break;
            }
            if (rc < 0) {
                out_reset(&o, &m);
                reason = STOP_BATCH;
                break;
            }
        }
        pos += (Py_ssize_t)size;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (failed) {
        out_free(&o);
        return PyErr_NoMemory();
    }
    PyObject *cols = as_rows ? out_rows(&o, record_type, topic, partition) : out_result(&o);
    out_free(&o);
    if (cols == NULL) return NULL;
    return Py_BuildValue("(niN)", pos, reason, cols);
}

static PyObject *parse_body(PyObject *self, PyObject *args) {
    Py_buffer view;
    int count, last_delta, log_append;
    long long base_ts, max_ts;
    if (!PyArg_ParseTuple(args, "y*iiLLp", &view, &count, &last_delta, &base_ts, &max_ts, &log_append))
        return NULL;
    Out o;
    if (out_init(&o) < 0) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = parse_records(view.buf, view.len, count, last_delta, 0, base_ts, max_ts, log_append,
                       INT64_MIN, INT64_MAX, &o);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (rc == NOMEM) {
        out_free(&o);
        return PyErr_NoMemory();
    }
    if (rc < 0) {
        out_free(&o);
        Py_RETURN_NONE;
    }
    PyObject *cols = out_result(&o);
    out_free(&o);
    return cols;
}

/* Walk batch headers (trusted framing only: no CRC, no body) from pos while a whole header and
 * batch fit in the buffer and the batches walked stay within limit bytes: the extent a fetch
 * serves and where the next fetch starts, without a Python loop per batch. */
static PyObject *walk(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, limit;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &pos, &limit)) return NULL;
    const uint8_t *buf = view.buf;
    Py_ssize_t start = pos, count = 0;
    long long next_offset = -1;
    while (view.len - pos >= HEADER_SIZE) {
        int64_t size = (int64_t)be32(buf + pos + 8) + 12;
        if (size < HEADER_SIZE || size > view.len - pos || pos - start + size > limit) break;
        next_offset = be64(buf + pos) + be32(buf + pos + 23) + 1;
        pos += (Py_ssize_t)size;
        count++;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(nnL)", pos, count, next_offset);
}

/* ---- Encoding: a producer's small batch, from its record lists --------------------------- */

static int uvarint_size(uint64_t u) {
    int n = 1;
    while (u > 0x7F) {
        u >>= 7;
        n++;
    }
    return n;
}

static uint8_t *put_uvarint(uint8_t *p, uint64_t u) {
    while (u > 0x7F) {
        *p++ = (uint8_t)((u & 0x7F) | 0x80);
        u >>= 7;
    }
    *p++ = (uint8_t)u;
    return p;
}

static uint64_t zigzag(int64_t n) { return ((uint64_t)n << 1) ^ (uint64_t)(n >> 63); }

/* A bytes-like field: data and length, or null (Py_None). Only bytes objects are taken
 * without a buffer request; anything else goes through the buffer protocol. */
typedef struct {
    const uint8_t *data;
    Py_ssize_t len; /* -1: null */
    Py_buffer view;
    int has_view;
} Field;

static int field_get(PyObject *obj, Field *f, const char *what) {
    f->has_view = 0;
    if (obj == Py_None) {
        f->data = NULL;
        f->len = -1;
        return 0;
    }
    if (PyBytes_CheckExact(obj)) {
        f->data = (const uint8_t *)PyBytes_AS_STRING(obj);
        f->len = PyBytes_GET_SIZE(obj);
        return 0;
    }
    if (PyObject_GetBuffer(obj, &f->view, PyBUF_SIMPLE) < 0) {
        PyErr_Format(PyExc_TypeError, "a record's %s must be bytes or None, not %.100s", what,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    f->has_view = 1;
    f->data = f->view.buf;
    f->len = f->view.len;
    return 0;
}

static void field_release(Field *f) {
    if (f->has_view) PyBuffer_Release(&f->view);
    f->has_view = 0;
}

static Py_ssize_t field_size(const Field *f) {
    return f->len < 0 ? 1 : uvarint_size((uint64_t)f->len << 1) + f->len;
}

static uint8_t *put_field(uint8_t *p, const Field *f) {
    if (f->len < 0) {
        *p++ = 1; /* zigzag(-1) */
        return p;
    }
    p = put_uvarint(p, (uint64_t)f->len << 1);
    memcpy(p, f->data, (size_t)f->len);
    return p + f->len;
}

/* One pass per record, twice: the first sizes the record (its length prefix comes first), the
 * second writes it. Item i of keys/headers is None when the list itself is None. */
static int record_pass(PyObject *ts_list, PyObject *keys, PyObject *values, PyObject *headers,
                       PyObject *deltas, long long base_ts, Py_ssize_t i, uint8_t **out,
                       const uint8_t *end, Py_ssize_t *size) {
    long long ts = PyLong_AsLongLong(PyList_GET_ITEM(ts_list, i));
    if (ts == -1 && PyErr_Occurred()) return -1;
    long long ts_delta;
    if (__builtin_sub_overflow(ts, base_ts, &ts_delta)) {
        PyErr_Format(PyExc_OverflowError,
                     "timestamps %lld and %lld are too far apart for a varint body", base_ts, ts);
        return -1;
    }
    long long delta = i;
    if (deltas != Py_None) {
        delta = PyLong_AsLongLong(PyList_GET_ITEM(deltas, i));
        if (delta == -1 && PyErr_Occurred()) return -1;
    }
    PyObject *hdrs = headers == Py_None ? Py_None : PyList_GET_ITEM(headers, i);
    Field key, value;
    if (field_get(keys == Py_None ? Py_None : PyList_GET_ITEM(keys, i), &key, "key") < 0)
        return -1;
    if (field_get(PyList_GET_ITEM(values, i), &value, "value") < 0) {
        field_release(&key);
        return -1;
    }
    int rc = -1;
    Py_ssize_t nh = 0;
    PyObject *hseq = NULL;
    if (hdrs != Py_None) {
        hseq = PySequence_Fast(hdrs, "a record's headers must be a list of (key, value) pairs");
        if (hseq == NULL) goto done;
        nh = PySequence_Fast_GET_SIZE(hseq);
    }
    Py_ssize_t inner = 1 + uvarint_size(zigzag(ts_delta)) + uvarint_size(zigzag(delta)) +
                       field_size(&key) + field_size(&value) + uvarint_size((uint64_t)nh << 1);
    uint8_t *p = NULL;
    /* The first round sizes the headers; the second (when writing) writes the record. */
    Py_ssize_t hbytes = 0;
    for (int write = 0; write < (out != NULL ? 2 : 1); write++) {
        if (write) {
            Py_ssize_t whole = uvarint_size(zigzag(inner + hbytes)) + inner + hbytes;
            if (whole > end - *out) {
                PyErr_SetString(PyExc_RuntimeError,
                                "encode_records: a record changed while it was encoded");
                goto done;
            }
            p = put_uvarint(*out, zigzag(inner + hbytes));
            *p++ = hdrs == Py_None ? 1 : 0; /* RECORD_NULL_HEADERS */
            p = put_uvarint(p, zigzag(ts_delta));
            p = put_uvarint(p, zigzag(delta));
            p = put_field(p, &key);
            p = put_field(p, &value);
            p = put_uvarint(p, (uint64_t)nh << 1);
        }
        for (Py_ssize_t h = 0; h < nh; h++) {
            PyObject *pair = PySequence_Fast_GET_ITEM(hseq, h);
            if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
                PyErr_SetString(PyExc_TypeError, "a record header must be a (key, value) tuple");
                goto done;
            }
            Field hk, hv;
            if (field_get(PyTuple_GET_ITEM(pair, 0), &hk, "header key") < 0) goto done;
            if (hk.len < 0) {
                PyErr_SetString(PyExc_TypeError, "a record header's key must not be None");
                goto done;
            }
            if (field_get(PyTuple_GET_ITEM(pair, 1), &hv, "header value") < 0) {
                field_release(&hk);
                goto done;
            }
            if (write) {
                p = put_field(p, &hk);
                p = put_field(p, &hv);
            } else {
                hbytes += field_size(&hk) + field_size(&hv);
            }
            field_release(&hk);
            field_release(&hv);
        }
    }
    inner += hbytes;
    *size = uvarint_size(zigzag(inner)) + inner;
    if (out != NULL) *out = p;
    rc = 0;
done:
    Py_XDECREF(hseq);
    field_release(&key);
    field_release(&value);
    return rc;
}

/* encode_records(timestamps, keys, values, headers, offset_deltas, base_timestamp): the varint
 * body of these records, as varint_records.encode_records writes it (keys, headers and
 * offset_deltas lists or None; None deltas: 0, 1, 2, ...). */
static PyObject *encode_records(PyObject *self, PyObject *args) {
    PyObject *ts_list, *keys, *values, *headers, *deltas;
    long long base_ts;
    if (!PyArg_ParseTuple(args, "O!OO!OOL", &PyList_Type, &ts_list, &keys, &PyList_Type, &values,
                          &headers, &deltas, &base_ts))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(values);
    if (PyList_GET_SIZE(ts_list) != n || (keys != Py_None && (!PyList_Check(keys) ||
                                                             PyList_GET_SIZE(keys) != n)) ||
        (headers != Py_None && (!PyList_Check(headers) || PyList_GET_SIZE(headers) != n)) ||
        (deltas != Py_None && (!PyList_Check(deltas) || PyList_GET_SIZE(deltas) != n))) {
        PyErr_SetString(PyExc_ValueError,
                        "encode_records: timestamps, keys, values, headers and offset deltas "
                        "must be lists (or None) of one length");
        return NULL;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t size;
        if (record_pass(ts_list, keys, values, headers, deltas, base_ts, i, NULL, NULL, &size) <
            0)
            return NULL;
        total += size;
    }
    PyObject *out = PyByteArray_FromStringAndSize(NULL, total);
    if (out == NULL) return NULL;
    uint8_t *p = (uint8_t *)PyByteArray_AS_STRING(out);
    const uint8_t *end = p + total;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t size;
        if (record_pass(ts_list, keys, values, headers, deltas, base_ts, i, &p, end, &size) < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    if (p != end) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_RuntimeError, "encode_records: a record changed while it was encoded");
        return NULL;
    }
    return out;
}

/* Seek from pos to the first batch whose last offset is at or past target: (status, pos, size)
 * with status 0 found (the batch's header is at pos; it may reach past the buffer), 1 the
 * buffer ended first (pos: the first batch not wholly in it, or the end), 2 a batch length
 * below the header size at pos (torn or corrupt framing: the caller stops there). Only the
 * framing is read, as in walk(). */
static PyObject *seek(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos;
    long long target;
    if (!PyArg_ParseTuple(args, "y*nL", &view, &pos, &target)) return NULL;
    const uint8_t *buf = view.buf;
    int status = 1;
    int64_t size = 0;
    while (view.len - pos >= HEADER_SIZE) {
        size = (int64_t)be32(buf + pos + 8) + 12;
        if (size < HEADER_SIZE) {
            status = 2;
            break;
        }
        int64_t last;
        if (__builtin_add_overflow(be64(buf + pos), (int64_t)be32(buf + pos + 23), &last) ||
            last >= target) {
            status = 0;
            break;
        }
        if (size > view.len - pos) break;
        pos += (Py_ssize_t)size;
        size = 0;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(inL)", status, pos, (long long)size);
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS,
     "walk(buf, pos, limit_bytes) -> (end_pos, batches, lastOffset + 1 of the last, or -1)"},
    {"seek", seek, METH_VARARGS,
     "seek(buf, pos, target_offset) -> (status: 0 found / 1 buffer ended / 2 bad length, "
     "pos, batch size or 0)"},
    {"scan", scan, METH_VARARGS,
     "scan(buf, pos, start_offset, end_offset, verify_crc, stop_at_transactional) -> "
     "(stop_pos, reason, columns)"},
    {"scan_rows", scan_rows, METH_VARARGS,
     "scan_rows(buf, pos, start_offset, end_offset, verify_crc, stop_at_transactional, "
     "record_type, topic, partition) -> (stop_pos, reason, [record_type(...), ...])"},
    {"parse_body", parse_body, METH_VARARGS,
     "parse_body(body, record_count, last_offset_delta, base_timestamp, max_timestamp, "
     "log_append_time) -> columns, or None if the body is corrupt"},
    {"encode_records", encode_records, METH_VARARGS,
     "encode_records(timestamps, keys, values, headers, offset_deltas, base_timestamp) -> "
     "bytearray"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_varint_scan",
                                    "Decoding (and encoding) varint record bodies in C.", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__varint_scan(void) {
    crc_init();
    return PyModule_Create(&module);
}
