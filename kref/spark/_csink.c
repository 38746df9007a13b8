/* The Spark sink's columnar encoder: Arrow key/value buffers -> Kafka record batches v2.

Theory of operation. A write task's common case (a `value` column, an
optional `key` column, an optional `headers` column, the `topic` option; no partition column)
needs, per Arrow record batch, only two things per row: the partition (Kafka's
murmur2 of the key, as the Java client and librdkafka's murmur2_random
choose it; rows with a null key all go to one partition the caller picks,
the Java client's sticky partitioner) and the row's bytes in a v2 record.
This file does both in two sequential passes over the Arrow buffers (the
binary/string layout: validity bitmap, int32 offsets (int64 for
large_binary/large_string), data), with no Python
object per row:

  1. partition of every row, counted per partition, then the row numbers
     grouped per partition in their original order (a counting sort);
  2. per partition, records packed into batches of at most max_batch_bytes
     (a lone record bigger than that gets a batch of its own: the caller
     hands such a batch to the librdkafka path), each batch written once
     into its final bytes object: header, records, CRC-32C.

An optional headers column (Spark's array<struct<key: string, value:
binary>>, Arrow's list<struct>: list validity and int32 offsets into the
struct's rows, the struct's key and value children as binary/string columns)
adds each row's headers to its record: a null or empty list is no header,
a null value is length -1. The caller refuses (librdkafka path) a struct
or key with nulls, which Kafka cannot carry.

Every batch is what kref/records/batch.py's build_batch makes of the same
records (baseOffset 0, no partition leader epoch, no producer id/epoch/
sequence, CreateTime with every record at `timestamp_ms`, uncompressed);
kref/spark/native_sink.py's encode_python is that reference and
tests/spark/test_native_sink.py compares the two byte for byte.

The buffers come through the buffer protocol (pyarrow.Buffer), so nothing
links against Arrow. Every offset is checked against its buffer before a
byte is read; bad input is a ValueError.

Built by scripts/build_cwalker.py; without it the sink uses its librdkafka
path (kref/spark/client.py).
*/

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* --- CRC-32C (Castagnoli), reflected, as Kafka's Crc32C ------------------ */

static uint32_t crc_table[8][256];

static void
crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

/* Slicing-by-8: the portable path. */
static uint32_t
crc_soft(uint32_t crc, const uint8_t *p, size_t n)
{
    crc = ~crc;
    while (n >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        crc = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
              crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
              crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = crc_table[0][(crc ^ *p++) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>
/* SSE4.2's crc32 instruction computes exactly CRC-32C: ~10x the table's rate. */
__attribute__((target("sse4.2"))) static uint32_t
crc_hw(uint32_t crc, const uint8_t *p, size_t n)
{
    uint64_t c = ~crc;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--)
        c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}
static int have_hw_crc;
#define HW_CRC_PROBE() (have_hw_crc = __builtin_cpu_supports("sse4.2"))
#define CRC32C(p, n) (have_hw_crc ? crc_hw(0, (p), (n)) : crc_soft(0, (p), (n)))
#else
#define HW_CRC_PROBE() ((void)0)
#define CRC32C(p, n) crc_soft(0, (p), (n))
#endif

/* --- Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2) ------- */

static uint32_t
murmur2(const uint8_t *data, Py_ssize_t length)
{
    const uint32_t m = 0x5bd1e995u;
    uint32_t h = 0x9747b28cu ^ (uint32_t)length;
    Py_ssize_t quads = length / 4;
    for (Py_ssize_t i = 0; i < quads; i++) {
        const uint8_t *q = data + 4 * i;
        uint32_t k = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
        k *= m;
        k ^= k >> 24;
        k *= m;
        h *= m;
        h ^= k;
    }
    const uint8_t *tail = data + 4 * quads;
    switch (length & 3) {
    case 3:
        h ^= (uint32_t)tail[2] << 16;
        /* fall through */
    case 2:
        h ^= (uint32_t)tail[1] << 8;
        /* fall through */
    case 1:
        h ^= (uint32_t)tail[0];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

/* --- one Arrow binary/string column -------------------------------------- */

typedef struct {
    int present;          /* 0: no column (every row null) */
    Py_buffer validity;   /* .buf NULL: no nulls */
    Py_buffer offsets;
    Py_buffer data;
    Py_ssize_t offset;    /* the array's offset into its buffers (slices) */
    int wide;             /* int64 offsets (large_binary, large_string) */
} Column;

static void
column_release(Column *c)
{
    if (c->validity.obj) PyBuffer_Release(&c->validity);
    if (c->offsets.obj) PyBuffer_Release(&c->offsets);
    if (c->data.obj) PyBuffer_Release(&c->data);
}

/* (validity or None, offsets, data or None, offset, offset width 4 or 8) -> Column,
   checked for n rows. */
static int
column_from(PyObject *spec, Py_ssize_t n, const char *name, Column *c)
{
    memset(c, 0, sizeof(*c));
    if (spec == Py_None)
        return 0;
    PyObject *validity, *offsets, *data;
    Py_ssize_t offset;
    int width;
    if (!PyTuple_Check(spec) || !PyArg_ParseTuple(spec, "OOOni", &validity, &offsets, &data, &offset, &width)) {
        PyErr_Format(PyExc_TypeError, "%s: expected (validity, offsets, data, offset, offset width)", name);
        return -1;
    }
    if (width != 4 && width != 8) {
        PyErr_Format(PyExc_ValueError, "%s: offset width must be 4 or 8", name);
        return -1;
    }
    c->wide = width == 8;
    c->present = 1;
    c->offset = offset;
    if (offset < 0) {
        PyErr_Format(PyExc_ValueError, "%s: negative array offset", name);
        return -1;
    }
    if (validity != Py_None && PyObject_GetBuffer(validity, &c->validity, PyBUF_SIMPLE) < 0)
        return -1;
    if (PyObject_GetBuffer(offsets, &c->offsets, PyBUF_SIMPLE) < 0)
        return -1;
    if (data != Py_None && PyObject_GetBuffer(data, &c->data, PyBUF_SIMPLE) < 0)
        return -1;
    if (c->validity.obj && c->validity.len < (offset + n + 7) / 8) {
        PyErr_Format(PyExc_ValueError, "%s: validity bitmap shorter than the array", name);
        return -1;
    }
    if (c->offsets.len / width < offset + n + 1) {
        PyErr_Format(PyExc_ValueError, "%s: offsets buffer shorter than the array", name);
        return -1;
    }
    return 0;
}

static inline int
is_null(const Column *c, Py_ssize_t row)
{
    if (!c->present)
        return 1;
    if (!c->validity.obj)
        return 0;
    Py_ssize_t bit = c->offset + row;
    return !((((const uint8_t *)c->validity.buf)[bit >> 3] >> (bit & 7)) & 1);
}

/* The bytes of a non-null row; -1 (ValueError set) when its offsets do not fit the data. */
static inline Py_ssize_t
value_of(const Column *c, Py_ssize_t row, const char *name, const uint8_t **out)
{
    int64_t start, end;
    if (c->wide) {
        const int64_t *off = (const int64_t *)c->offsets.buf + c->offset + row;
        start = off[0];
        end = off[1];
    } else {
        const int32_t *off = (const int32_t *)c->offsets.buf + c->offset + row;
        start = off[0];
        end = off[1];
    }
    Py_ssize_t len = c->data.obj ? c->data.len : 0;
    /* A record's lengths are int32 on the wire. */
    if (start < 0 || end < start || end > len || end - start > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s: row %zd has offsets %lld..%lld outside its %zd data bytes",
                     name, row, (long long)start, (long long)end, len);
        return -1;
    }
    *out = (const uint8_t *)c->data.buf + start;
    return end - start;
}

/* --- records ------------------------------------------------------------- */

static inline int
varint_size(int64_t v)
{
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int n = 1;
    while (z >= 0x80) {
        z >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *
put_varint(uint8_t *p, int64_t v)
{
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (z >= 0x80) {
        *p++ = (uint8_t)(z | 0x80);
        z >>= 7;
    }
    *p++ = (uint8_t)z;
    return p;
}

static inline uint8_t *
put_be(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--)
        *p++ = (uint8_t)(v >> (8 * i));
    return p;
}

#define HEADER_SIZE 61

typedef struct {
    const uint8_t *kp, *vp;
    Py_ssize_t klen, vlen; /* -1: null */
    Py_ssize_t hstart, hcount; /* the row's headers: struct rows [hstart, hstart + hcount) */
    int64_t hbytes;            /* their encoded size, without the count */
} Row;

/* The headers column: a list<struct<key, value>> array's buffers. */
typedef struct {
    int present;
    Py_buffer validity, offsets; /* the list's: validity (.buf NULL: no nulls), int32 offsets */
    Py_ssize_t offset;           /* the list array's offset (slices) */
    Py_ssize_t rows;             /* the struct's length */
    Column key, value;           /* the struct's children, as sliced to the struct */
} Headers;

/* A record's fields after its length varint: attributes, timestampDelta (0),
   offsetDelta, key, value, headers count and headers. */
static inline int64_t
body_size(Py_ssize_t delta, const Row *r)
{
    Py_ssize_t klen = r->klen, vlen = r->vlen;
    return 1 + 1 + varint_size(delta) + varint_size(klen) + (klen > 0 ? klen : 0) + varint_size(vlen) +
           (vlen > 0 ? vlen : 0) + varint_size(r->hcount) + r->hbytes;
}

/* One batch of rows rows[0..count) -> bytes (exactly build_batch's). */
static PyObject *
write_batch(const Row *rows, const int32_t *which, Py_ssize_t count, int64_t size, int64_t timestamp_ms,
            const Headers *hd)
{
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (!out)
        return NULL;
    uint8_t *base = (uint8_t *)PyBytes_AS_STRING(out);
    uint8_t *p = base;
    p = put_be(p, 0, 8);                           /* baseOffset */
    p = put_be(p, (uint64_t)(size - 12), 4);       /* batchLength */
    p = put_be(p, (uint32_t)-1, 4);                /* partitionLeaderEpoch */
    *p++ = 2;                                      /* magic */
    uint8_t *crc_at = p;
    p += 4;
    p = put_be(p, 0, 2);                           /* attributes */
    p = put_be(p, (uint64_t)(count - 1), 4);       /* lastOffsetDelta */
    p = put_be(p, (uint64_t)timestamp_ms, 8);      /* baseTimestamp */
    p = put_be(p, (uint64_t)timestamp_ms, 8);      /* maxTimestamp */
    p = put_be(p, (uint64_t)-1, 8);                /* producerId */
    p = put_be(p, (uint16_t)-1, 2);                /* producerEpoch */
    p = put_be(p, (uint32_t)-1, 4);                /* baseSequence */
    p = put_be(p, (uint64_t)count, 4);             /* recordsCount */
    for (Py_ssize_t i = 0; i < count; i++) {
        const Row *r = &rows[which[i]];
        p = put_varint(p, body_size(i, r));
        *p++ = 0;
        *p++ = 0;
        p = put_varint(p, i);
        p = put_varint(p, r->klen);
        if (r->klen > 0) {
            memcpy(p, r->kp, r->klen);
            p += r->klen;
        }
        p = put_varint(p, r->vlen);
        if (r->vlen > 0) {
            memcpy(p, r->vp, r->vlen);
            p += r->vlen;
        }
        p = put_varint(p, r->hcount);
        for (Py_ssize_t h = r->hstart; h < r->hstart + r->hcount; h++) {
            /* Checked in pass 1: these offsets fit their buffers. */
            const uint8_t *hp = NULL;
            Py_ssize_t hl = value_of(&hd->key, h, "header key", &hp);
            p = put_varint(p, hl);
            memcpy(p, hp, (size_t)hl);
            p += hl;
            if (is_null(&hd->value, h)) {
                p = put_varint(p, -1);
            } else {
                hl = value_of(&hd->value, h, "header value", &hp);
                p = put_varint(p, hl);
                memcpy(p, hp, (size_t)hl);
                p += hl;
            }
        }
    }
    if (p - base != size) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_SystemError, "_csink: batch size mismatch");
        return NULL;
    }
    uint32_t crc = CRC32C(crc_at + 4, (size_t)(size - 21));
    put_be(crc_at, crc, 4);
    return out;
}

static void
headers_release(Headers *h)
{
    if (h->validity.obj) PyBuffer_Release(&h->validity);
    if (h->offsets.obj) PyBuffer_Release(&h->offsets);
    column_release(&h->key);
    column_release(&h->value);
}

/* (list validity or None, list offsets, list offset, struct length, key spec, value spec)
   -> Headers, checked for n rows. */
static int
headers_from(PyObject *spec, Py_ssize_t n, Headers *h)
{
    memset(h, 0, sizeof(*h));
    if (spec == Py_None)
        return 0;
    PyObject *validity, *offsets, *key_spec, *value_spec;
    if (!PyTuple_Check(spec) || !PyArg_ParseTuple(spec, "OOnnOO", &validity, &offsets, &h->offset, &h->rows,
                                                  &key_spec, &value_spec)) {
        PyErr_SetString(PyExc_TypeError,
                        "headers: expected (validity, offsets, offset, struct length, key spec, value spec)");
        return -1;
    }
    h->present = 1;
    if (h->offset < 0 || h->rows < 0) {
        PyErr_SetString(PyExc_ValueError, "headers: negative offset or length");
        return -1;
    }
    if (validity != Py_None && PyObject_GetBuffer(validity, &h->validity, PyBUF_SIMPLE) < 0)
        return -1;
    if (PyObject_GetBuffer(offsets, &h->offsets, PyBUF_SIMPLE) < 0)
        return -1;
    if (h->validity.obj && h->validity.len < (h->offset + n + 7) / 8) {
        PyErr_SetString(PyExc_ValueError, "headers: validity bitmap shorter than the array");
        return -1;
    }
    if (h->offsets.len / 4 < h->offset + n + 1) {
        PyErr_SetString(PyExc_ValueError, "headers: offsets buffer shorter than the array");
        return -1;
    }
    if (key_spec == Py_None || column_from(key_spec, h->rows, "header key", &h->key) < 0 ||
        column_from(value_spec, h->rows, "header value", &h->value) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "headers: a key column is required");
        return -1;
    }
    if (!h->value.present) {
        PyErr_SetString(PyExc_ValueError, "headers: a value column is required");
        return -1;
    }
    return 0;
}

/* Row i's headers: hstart, hcount, hbytes. -1 (ValueError set) on bad offsets or a null key. */
static int
row_headers(const Headers *h, Py_ssize_t i, Row *r)
{
    r->hstart = r->hcount = 0;
    r->hbytes = 0;
    if (!h->present)
        return 0;
    Py_ssize_t bit = h->offset + i;
    if (h->validity.obj && !((((const uint8_t *)h->validity.buf)[bit >> 3] >> (bit & 7)) & 1))
        return 0;
    const int32_t *off = (const int32_t *)h->offsets.buf + h->offset + i;
    if (off[0] < 0 || off[1] < off[0] || off[1] > h->rows) {
        PyErr_Format(PyExc_ValueError, "headers: row %zd has offsets %d..%d outside the %zd headers", i,
                     off[0], off[1], h->rows);
        return -1;
    }
    r->hstart = off[0];
    r->hcount = off[1] - off[0];
    for (Py_ssize_t k = r->hstart; k < off[1]; k++) {
        const uint8_t *p;
        if (is_null(&h->key, k)) {
            PyErr_Format(PyExc_ValueError, "headers: row %zd has a null header key", i);
            return -1;
        }
        Py_ssize_t kl = value_of(&h->key, k, "header key", &p);
        if (kl < 0)
            return -1;
        Py_ssize_t vl = -1;
        if (!is_null(&h->value, k) && (vl = value_of(&h->value, k, "header value", &p)) < 0)
            return -1;
        r->hbytes += varint_size(kl) + kl + varint_size(vl) + (vl > 0 ? vl : 0);
    }
    if (r->hbytes > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "headers: row %zd has more than 2 GiB of headers", i);
        return -1;
    }
    return 0;
}

static PyObject *
encode(PyObject *self, PyObject *args)
{
    PyObject *key_spec, *value_spec, *headers_spec = Py_None;
    Py_ssize_t n, n_partitions, null_key_partition;
    long long timestamp_ms;
    Py_ssize_t max_batch_bytes;
    if (!PyArg_ParseTuple(args, "OOnnnLn|O", &key_spec, &value_spec, &n, &n_partitions, &null_key_partition,
                          &timestamp_ms, &max_batch_bytes, &headers_spec))
        return NULL;
    if (n < 0 || n > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "row count out of range");
        return NULL;
    }
    if (n_partitions < 1 || n_partitions > (1 << 24) || null_key_partition < 0 ||
        null_key_partition >= n_partitions) {
        PyErr_SetString(PyExc_ValueError, "partition count or null-key partition out of range");
        return NULL;
    }
    if (max_batch_bytes < HEADER_SIZE + 8) {
        PyErr_SetString(PyExc_ValueError, "max_batch_bytes too small");
        return NULL;
    }
    if (value_spec == Py_None) {
        PyErr_SetString(PyExc_ValueError, "a value column is required");
        return NULL;
    }
    Column key, value;
    Headers headers;
    Row *rows = NULL;
    int32_t *part = NULL, *order = NULL;
    Py_ssize_t *start = NULL;
    PyObject *result = NULL;
    memset(&key, 0, sizeof key);
    memset(&value, 0, sizeof value);
    memset(&headers, 0, sizeof headers);
    if (column_from(key_spec, n, "key", &key) < 0 || column_from(value_spec, n, "value", &value) < 0 ||
        headers_from(headers_spec, n, &headers) < 0)
        goto done;
    rows = PyMem_Malloc(sizeof(Row) * (n ? n : 1));
    part = PyMem_Malloc(sizeof(int32_t) * (n ? n : 1));
    order = PyMem_Malloc(sizeof(int32_t) * (n ? n : 1));
    start = PyMem_Calloc(n_partitions + 1, sizeof(Py_ssize_t));
    if (!rows || !part || !order || !start) {
        PyErr_NoMemory();
        goto done;
    }
    /* Pass 1: each row's bytes and partition; rows per partition. */
    for (Py_ssize_t i = 0; i < n; i++) {
        Row *r = &rows[i];
        r->kp = r->vp = NULL;
        r->klen = r->vlen = -1;
        if (!is_null(&key, i) && (r->klen = value_of(&key, i, "key", &r->kp)) < 0)
            goto done;
        if (!is_null(&value, i) && (r->vlen = value_of(&value, i, "value", &r->vp)) < 0)
            goto done;
        if (row_headers(&headers, i, r) < 0)
            goto done;
        int32_t p = r->klen < 0 ? (int32_t)null_key_partition
                                : (int32_t)((murmur2(r->kp, r->klen) & 0x7fffffffu) % (uint32_t)n_partitions);
        part[i] = p;
        start[p + 1]++;
    }
    for (Py_ssize_t p = 0; p < n_partitions; p++)
        start[p + 1] += start[p];
    {
        /* Stable counting sort: order[] holds the row numbers partition by partition. */
        Py_ssize_t *fill = PyMem_Malloc(sizeof(Py_ssize_t) * n_partitions);
        if (!fill) {
            PyErr_NoMemory();
            goto done;
        }
        memcpy(fill, start, sizeof(Py_ssize_t) * n_partitions);
        for (Py_ssize_t i = 0; i < n; i++)
            order[fill[part[i]]++] = (int32_t)i;
        PyMem_Free(fill);
    }
    result = PyList_New(0);
    if (!result)
        goto done;
    /* Pass 2: batches per partition, bounded by max_batch_bytes. */
    for (Py_ssize_t p = 0; p < n_partitions; p++) {
        Py_ssize_t j = start[p], end = start[p + 1];
        while (j < end) {
            int64_t size = HEADER_SIZE;
            Py_ssize_t k = j;
            while (k < end) {
                const Row *r = &rows[order[k]];
                int64_t body = body_size(k - j, r);
                int64_t rec = varint_size(body) + body;
                if (k > j && size + rec > max_batch_bytes)
                    break;
                size += rec;
                k++;
            }
            PyObject *batch = write_batch(rows, order + j, k - j, size, timestamp_ms, &headers);
            if (!batch)
                goto fail;
            PyObject *which = PyBytes_FromStringAndSize((const char *)(order + j), (k - j) * 4);
            if (!which) {
                Py_DECREF(batch);
                goto fail;
            }
            PyObject *item = Py_BuildValue("(nNN)", p, batch, which);
            if (!item || PyList_Append(result, item) < 0) {
                Py_XDECREF(item);
                goto fail;
            }
            Py_DECREF(item);
            j = k;
        }
    }
    goto done;
fail:
    Py_CLEAR(result);
done:
    column_release(&key);
    column_release(&value);
    headers_release(&headers);
    PyMem_Free(rows);
    PyMem_Free(part);
    PyMem_Free(order);
    PyMem_Free(start);
    return result;
}

static PyObject *
py_murmur2(PyObject *self, PyObject *args)
{
    Py_buffer b;
    if (!PyArg_ParseTuple(args, "y*", &b))
        return NULL;
    uint32_t h = murmur2(b.buf, b.len);
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(h);
}

static PyObject *
py_crc32c(PyObject *self, PyObject *args)
{
    Py_buffer b;
    int soft = 0;
    if (!PyArg_ParseTuple(args, "y*|p", &b, &soft))
        return NULL;
    uint32_t c = soft ? crc_soft(0, b.buf, (size_t)b.len) : CRC32C(b.buf, (size_t)b.len);
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(c);
}

static PyMethodDef methods[] = {
    {"encode", encode, METH_VARARGS,
     "encode(key, value, n, n_partitions, null_key_partition, timestamp_ms, max_batch_bytes, headers=None)\n"
     "-> [(partition, batch bytes, row numbers as native int32 bytes)]; key/value are\n"
     "(validity or None, offsets, data or None, array offset, offset width 4|8), key may be None."},
    {"murmur2", py_murmur2, METH_VARARGS, "Kafka's murmur2 of a bytes-like object (unsigned)."},
    {"crc32c", py_crc32c, METH_VARARGS,
     "crc32c(data, soft=False): CRC-32C of a bytes-like object (for tests; soft: the table path)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_csink", NULL, -1, methods};

PyMODINIT_FUNC
PyInit__csink(void)
{
    crc_init();
    HW_CRC_PROBE();
    return PyModule_Create(&module);
}
