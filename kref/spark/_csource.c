/* The Spark reader's columnar decoder: Fetch record batches straight into
Arrow buffers.

Theory of operation. A read task's fast path (kref/spark/native_source.py)
fetches raw v2 record batches from the partition's leader and needs them as
Arrow columns: key and value (binary: validity bitmap, int32 offsets, data),
offset (int64), timestamp (int64 microseconds) and timestampType (int32),
and with includeHeaders the headers column, Arrow's
list<struct<key: string, value: binary>>: the list's validity (a record
without headers is null, as Spark's Kafka source and librdkafka give it) and
offsets into the headers, then the header keys (int32 offsets, UTF-8 data,
never null) and values (validity, int32 offsets, data). A header key that is
not valid UTF-8 raises ValueError (the librdkafka path reads that range).
decode() walks the batches of one partition's `records` field from a byte
position, keeps the records whose offsets lie in [from_offset, until_offset)
and returns those buffers as bytes objects, ready for
pyarrow.Array.from_buffers. Two passes over the same bytes: the first checks
every length and counts records and key/value bytes, the second allocates the
exact sizes and fills them, so nothing grows and nothing is bounded by more
than the input.

The walk stops, and says why, at what it does not decode itself: the end of
the buffer, a batch cut short by the response's size limit (a partial tail,
as Kafka consumers treat it), a compressed batch (Python decompresses it with
kref.records.compression and hands the records section to decode_section,
which shares the record loop), or anything unusual (magic 0/1, an impossible
batch length): the caller then falls back to the librdkafka path. Control
batches (transaction markers) are skipped; a batch's offsets all count for
the position (next_offset), as a consumer's position moves past gaps.

Kafka's rules as in kref/records/batch.py (the pure-Python reference in
native_source.py is built on it and tests compare the two column for
column): varints as Kafka's ByteUtils (5 bytes int32, 10 bytes int64,
zigzag), a record must end exactly where its length says, key and value
lengths are -1 (null) or fit the record, a LogAppendTime batch reports its
maxTimestamp for every record. A malformed record raises ValueError (the
caller falls back). CRCs are not checked, as librdkafka does not by default
(check.crcs=false).

Built by scripts/build_cwalker.py; without it the reader uses the
pure-Python reference or the librdkafka path.
*/

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { ST_END = 0, ST_PARTIAL = 1, ST_COMPRESSED = 2, ST_UNUSUAL = 3 };

#define LOG_OVERHEAD 12
#define HEADER_SIZE 61
#define ATTR_COMPRESSION 0x07
#define ATTR_LOG_APPEND_TIME 0x08
#define ATTR_CONTROL 0x20

#include "../records/_cvarint.h"  /* read_varint, shared with the record walker */

static inline int64_t
be64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return (int64_t)v;
}

static inline int32_t
be32(const uint8_t *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
}

/* Where the second pass writes; all NULL in the first (counting) pass. */
typedef struct {
    Py_ssize_t n;            /* records kept so far */
    Py_ssize_t key_bytes, value_bytes, key_nulls, value_nulls;
    uint8_t *key_valid, *value_valid;
    int32_t *key_offs, *value_offs;
    char *key_data, *value_data;
    int64_t *offsets, *stamps;
    int32_t *types;
    int fill;
    /* includeHeaders: the headers column's counts and buffers. */
    int headers;
    Py_ssize_t n_headers, empty_headers, hkey_bytes, hvalue_bytes, hvalue_nulls;
    uint8_t *h_valid, *hv_valid;
    int32_t *h_offs, *hk_offs, *hv_offs;
    char *hk_data, *hv_data;
} Sink;

/* Whether d[0..n) is UTF-8 as Arrow's string type needs it (no overlong
   forms, no surrogates, nothing above U+10FFFF). */
static int
valid_utf8(const uint8_t *d, Py_ssize_t n)
{
    Py_ssize_t i = 0;
    while (i < n) {
        uint8_t c = d[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int more;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            more = 1;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            more = 2;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            more = 3;
            cp = c & 0x07;
        } else
            return 0;
        if (more > n - i - 1)
            return 0;
        for (int j = 1; j <= more; j++) {
            if ((d[i + j] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (d[i + j] & 0x3F);
        }
        if ((more == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
            (more == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        i += more + 1;
    }
    return 1;
}

static int
bad(const char *what, int64_t detail)
{
    PyErr_Format(PyExc_ValueError, "malformed record batch: %s (%lld)", what, (long long)detail);
    return -1;
}

/* The records of one records section (uncompressed). Returns 0 or -1 (error set). */
static int
walk_records(const uint8_t *d, Py_ssize_t end, int32_t count, int64_t base_offset,
             int32_t last_delta, int64_t base_ts, int log_append, int64_t max_ts, int64_t from,
             int64_t until, Sink *s)
{
    Py_ssize_t pos = 0;
    if (count < 0 || (int64_t)count * 7 > end)
        return bad("recordsCount does not fit the records section", count);
    for (int32_t i = 0; i < count; i++) {
        int64_t length = 0, ts_delta = 0, off_delta = 0, klen = 0, vlen = 0, nh = 0, hl = 0;
        if (read_varint(d, pos, end, 5, &length, &pos) < 0 || length <= 0 || length > end - pos)
            return bad("record length", i);
        Py_ssize_t rend = pos + (Py_ssize_t)length;
        pos += 1; /* attributes */
        if (pos > rend || read_varint(d, pos, rend, 10, &ts_delta, &pos) < 0 ||
            read_varint(d, pos, rend, 5, &off_delta, &pos) < 0 ||
            read_varint(d, pos, rend, 5, &klen, &pos) < 0)
            return bad("record fields", i);
        Py_ssize_t kpos = pos;
        if (klen >= 0) {
            if (klen > rend - pos)
                return bad("key length", klen);
            pos += (Py_ssize_t)klen;
        } else if (klen != -1)
            return bad("key length", klen);
        if (read_varint(d, pos, rend, 5, &vlen, &pos) < 0)
            return bad("value length", i);
        Py_ssize_t vpos = pos;
        if (vlen >= 0) {
            if (vlen > rend - pos)
                return bad("value length", vlen);
            pos += (Py_ssize_t)vlen;
        } else if (vlen != -1)
            return bad("value length", vlen);
        if (read_varint(d, pos, rend, 5, &nh, &pos) < 0 || nh < 0 || nh * 2 > rend - pos)
            return bad("headers count", nh);
        /* Headers are kept (counted, then written) only for a record in range. */
        int keep_headers = s->headers && base_offset + off_delta >= from && base_offset + off_delta < until;
        for (int64_t h = 0; h < nh; h++) {
            if (read_varint(d, pos, rend, 5, &hl, &pos) < 0 || hl < 0 || hl > rend - pos)
                return bad("header key length", hl);
            if (keep_headers) {
                Py_ssize_t j = s->n_headers;
                if (s->fill) {
                    memcpy(s->hk_data + s->hkey_bytes, d + pos, (size_t)hl);
                    s->hk_offs[j + 1] = (int32_t)(s->hkey_bytes + hl);
                } else if (!valid_utf8(d + pos, (Py_ssize_t)hl))
                    return bad("header key is not UTF-8, record", i);
                s->hkey_bytes += (Py_ssize_t)hl;
            }
            pos += (Py_ssize_t)hl;
            if (read_varint(d, pos, rend, 5, &hl, &pos) < 0 || hl < -1 || hl > rend - pos)
                return bad("header value length", hl);
            if (keep_headers) {
                Py_ssize_t j = s->n_headers++;
                if (hl < 0)
                    s->hvalue_nulls++;
                if (s->fill) {
                    if (hl >= 0) {
                        if (s->hv_valid != NULL)
                            s->hv_valid[j >> 3] |= (uint8_t)(1 << (j & 7));
                        memcpy(s->hv_data + s->hvalue_bytes, d + pos, (size_t)hl);
                    }
                    s->hv_offs[j + 1] = (int32_t)(s->hvalue_bytes + (hl > 0 ? hl : 0));
                }
                if (hl > 0)
                    s->hvalue_bytes += (Py_ssize_t)hl;
            }
            if (hl > 0)
                pos += (Py_ssize_t)hl;
        }
        if (s->hkey_bytes > INT32_MAX || s->hvalue_bytes > INT32_MAX || s->n_headers > INT32_MAX)
            return bad("more than 2 GiB of headers in one call", s->n);
        if (pos != rend)
            return bad("record length does not match its fields", length);
        if (i == count - 1 && off_delta > last_delta)
            return bad("record offset delta exceeds lastOffsetDelta", off_delta);
        int64_t offset = base_offset + off_delta;
        if (offset < from || offset >= until)
            continue;
        Py_ssize_t k = s->n++;
        if (klen < 0)
            s->key_nulls++;
        if (vlen < 0)
            s->value_nulls++;
        if (s->fill) {
            /* No bitmap at all when the column has no null (Arrow allows it). */
            if (klen >= 0) {
                if (s->key_valid != NULL)
                    s->key_valid[k >> 3] |= (uint8_t)(1 << (k & 7));
                memcpy(s->key_data + s->key_bytes, d + kpos, (size_t)klen);
            }
            if (vlen >= 0) {
                if (s->value_valid != NULL)
                    s->value_valid[k >> 3] |= (uint8_t)(1 << (k & 7));
                memcpy(s->value_data + s->value_bytes, d + vpos, (size_t)vlen);
            }
            s->offsets[k] = offset;
            s->stamps[k] = (log_append ? max_ts : base_ts + ts_delta) * 1000;
            s->types[k] = log_append ? 1 : 0;
            if (s->headers) {
                if (nh > 0 && s->h_valid != NULL)
                    s->h_valid[k >> 3] |= (uint8_t)(1 << (k & 7));
                s->h_offs[k + 1] = (int32_t)s->n_headers;
            }
        }
        if (s->headers && nh == 0)
            s->empty_headers++;
        if (klen > 0)
            s->key_bytes += (Py_ssize_t)klen;
        if (vlen > 0)
            s->value_bytes += (Py_ssize_t)vlen;
        if (s->fill) {
            s->key_offs[k + 1] = (int32_t)s->key_bytes;
            s->value_offs[k + 1] = (int32_t)s->value_bytes;
        }
        if (s->key_bytes > INT32_MAX || s->value_bytes > INT32_MAX)
            return bad("more than 2 GiB of keys or values in one call", s->n);
    }
    if (pos != end)
        return bad("bytes left after the last record", end - pos);
    return 0;
}

/* The batches of buf from pos. Sets *status, *stop (the position of the batch
   not decoded, or the end) and *next_offset (past the last batch consumed). */
static int
walk_batches(const uint8_t *d, Py_ssize_t len, Py_ssize_t pos, int64_t from, int64_t until,
             Sink *s, int *status, Py_ssize_t *stop, int64_t *next_offset)
{
    *status = ST_END;
    while (pos < len) {
        Py_ssize_t left = len - pos;
        if (left < LOG_OVERHEAD) {
            *status = ST_PARTIAL;
            break;
        }
        int64_t base_offset = be64(d + pos);
        int32_t batch_length = be32(d + pos + 8);
        if (batch_length < HEADER_SIZE - LOG_OVERHEAD) {
            *status = ST_UNUSUAL;
            break;
        }
        if (left < LOG_OVERHEAD + (Py_ssize_t)batch_length) {
            /* Cut by the response's size limit; a legacy message set too. */
            *status = ST_PARTIAL;
            break;
        }
        if (d[pos + 16] != 2) {
            *status = ST_UNUSUAL;
            break;
        }
        if (base_offset >= until)
            break;
        const uint8_t *hd = d + pos;
        int attributes = (hd[21] << 8) | hd[22];
        int32_t last_delta = be32(hd + 23);
        if (last_delta < 0) {
            *status = ST_UNUSUAL;
            break;
        }
        if (attributes & ATTR_COMPRESSION) {
            if (!(attributes & ATTR_CONTROL)) {
                *status = ST_COMPRESSED;
                break;
            }
        } else if (!(attributes & ATTR_CONTROL) && base_offset + last_delta >= from) {
            if (walk_records(hd + HEADER_SIZE, LOG_OVERHEAD + batch_length - HEADER_SIZE,
                             be32(hd + 57), base_offset, last_delta, be64(hd + 27),
                             (attributes & ATTR_LOG_APPEND_TIME) != 0, be64(hd + 35), from, until,
                             s) < 0)
                return -1;
        }
        if (base_offset + last_delta + 1 > *next_offset)
            *next_offset = base_offset + last_delta + 1;
        pos += LOG_OVERHEAD + (Py_ssize_t)batch_length;
    }
    *stop = pos;
    return 0;
}

static PyObject *
bitmap(Py_ssize_t n, Py_ssize_t nulls, uint8_t **out)
{
    *out = NULL;
    if (nulls == 0)
        Py_RETURN_NONE;
    PyObject *b = PyBytes_FromStringAndSize(NULL, (n + 7) / 8);
    if (b != NULL) {
        *out = (uint8_t *)PyBytes_AS_STRING(b);
        memset(*out, 0, (size_t)((n + 7) / 8));
    }
    return b;
}

static PyObject *
new_buffer(Py_ssize_t size, void *out)
{
    PyObject *b = PyBytes_FromStringAndSize(NULL, size);
    if (b != NULL)
        *(char **)out = PyBytes_AS_STRING(b);
    return b;
}

/* Allocate the exact buffers the counting pass found, then run the walk again
   filling them; returns the column tuple. `again` reruns the walk. */
typedef int (*walk_fn)(void *ctx, Sink *s);

static PyObject *
columns(walk_fn walk, void *ctx, const Sink *counted)
{
    Sink s;
    memset(&s, 0, sizeof s);
    s.fill = 1;
    s.headers = counted->headers;
    Py_ssize_t n = counted->n;
    PyObject *kv = bitmap(n, counted->key_nulls, &s.key_valid);
    PyObject *vv = bitmap(n, counted->value_nulls, &s.value_valid);
    PyObject *ko = new_buffer((n + 1) * 4, &s.key_offs);
    PyObject *kd = new_buffer(counted->key_bytes, &s.key_data);
    PyObject *vo = new_buffer((n + 1) * 4, &s.value_offs);
    PyObject *vd = new_buffer(counted->value_bytes, &s.value_data);
    PyObject *of = new_buffer(n * 8, &s.offsets);
    PyObject *st = new_buffer(n * 8, &s.stamps);
    PyObject *ty = new_buffer(n * 4, &s.types);
    /* The headers column's buffers (empty ones when not asked for). */
    Py_ssize_t nh = counted->n_headers, hn = counted->headers ? n : 0;
    PyObject *hv = bitmap(hn, counted->headers ? counted->empty_headers : 0, &s.h_valid);
    PyObject *ho = new_buffer(counted->headers ? (n + 1) * 4 : 0, &s.h_offs);
    PyObject *hko = new_buffer(counted->headers ? (nh + 1) * 4 : 0, &s.hk_offs);
    PyObject *hkd = new_buffer(counted->hkey_bytes, &s.hk_data);
    PyObject *hvv = bitmap(nh, counted->hvalue_nulls, &s.hv_valid);
    PyObject *hvo = new_buffer(counted->headers ? (nh + 1) * 4 : 0, &s.hv_offs);
    PyObject *hvd = new_buffer(counted->hvalue_bytes, &s.hv_data);
    PyObject *result = NULL;
    if (kv && vv && ko && kd && vo && vd && of && st && ty && hv && ho && hko && hkd && hvv && hvo && hvd) {
        s.key_offs[0] = 0;
        s.value_offs[0] = 0;
        if (counted->headers)
            s.h_offs[0] = s.hk_offs[0] = s.hv_offs[0] = 0;
        if (walk(ctx, &s) == 0) {
            if (s.n != n || s.key_bytes != counted->key_bytes || s.value_bytes != counted->value_bytes ||
                s.n_headers != nh || s.hkey_bytes != counted->hkey_bytes ||
                s.hvalue_bytes != counted->hvalue_bytes)
                PyErr_SetString(PyExc_RuntimeError, "_csource: the two passes disagree");
            else if (!counted->headers)
                result = Py_BuildValue("(nnOOOnOOOOOO)", n, counted->key_nulls, kv, ko, kd,
                                       counted->value_nulls, vv, vo, vd, of, st, ty);
            else
                result = Py_BuildValue("(nnOOOnOOOOOOnOOnOOnOOO)", n, counted->key_nulls, kv, ko, kd,
                                       counted->value_nulls, vv, vo, vd, of, st, ty,
                                       counted->empty_headers, hv, ho, nh, hko, hkd,
                                       counted->hvalue_nulls, hvv, hvo, hvd);
        }
    }
    Py_XDECREF(kv); Py_XDECREF(vv); Py_XDECREF(ko); Py_XDECREF(kd); Py_XDECREF(vo);
    Py_XDECREF(vd); Py_XDECREF(of); Py_XDECREF(st); Py_XDECREF(ty);
    Py_XDECREF(hv); Py_XDECREF(ho); Py_XDECREF(hko); Py_XDECREF(hkd); Py_XDECREF(hvv);
    Py_XDECREF(hvo); Py_XDECREF(hvd);
    return result;
}

typedef struct {
    const uint8_t *d;
    Py_ssize_t len, pos;
    int64_t from, until;
    int status;
    Py_ssize_t stop;
    int64_t next_offset;
} BatchWalk;

static int
batch_walk(void *ctx, Sink *s)
{
    BatchWalk *w = ctx;
    int status;
    Py_ssize_t stop;
    int64_t next_offset = w->next_offset;
    return walk_batches(w->d, w->stop, w->pos, w->from, w->until, s, &status, &stop, &next_offset);
}

PyDoc_STRVAR(decode_doc,
"decode(buf, pos, from_offset, until_offset, headers=False) -> (status, stop, next_offset, columns)\n\n"
"Walk the v2 batches of buf from pos; keep records in [from_offset, until_offset).\n"
"status: 0 end, 1 partial tail, 2 compressed batch at stop, 3 unusual batch at stop.\n"
"next_offset: past the last batch consumed (-1 if none). columns: (n, key_nulls,\n"
"key_validity|None, key_offsets, key_data, value_nulls, value_validity|None,\n"
"value_offsets, value_data, offsets, timestamps_us, timestamp_types), and with\n"
"headers: + (records_without_headers, list_validity|None, list_offsets, n_headers,\n"
"header_key_offsets, header_key_data, header_value_nulls, header_value_validity|None,\n"
"header_value_offsets, header_value_data).");

static PyObject *
decode(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t pos;
    long long from, until;
    int headers = 0;
    if (!PyArg_ParseTuple(args, "y*nLL|p", &view, &pos, &from, &until, &headers))
        return NULL;
    PyObject *result = NULL;
    if (pos < 0 || pos > view.len) {
        PyErr_SetString(PyExc_ValueError, "position outside the buffer");
        goto done;
    }
    BatchWalk w = {view.buf, view.len, pos, from, until, ST_END, 0, -1};
    Sink counted;
    memset(&counted, 0, sizeof counted);
    counted.headers = headers;
    if (walk_batches(w.d, w.len, w.pos, from, until, &counted, &w.status, &w.stop, &w.next_offset) < 0)
        goto done;
    PyObject *cols = columns(batch_walk, &w, &counted);
    if (cols == NULL)
        goto done;
    result = Py_BuildValue("(inLN)", w.status, w.stop, (long long)w.next_offset, cols);
done:
    PyBuffer_Release(&view);
    return result;
}

typedef struct {
    const uint8_t *d;
    Py_ssize_t len;
    int32_t count, last_delta;
    int64_t base_offset, base_ts, max_ts, from, until;
    int log_append;
} SectionWalk;

static int
section_walk(void *ctx, Sink *s)
{
    SectionWalk *w = ctx;
    return walk_records(w->d, w->len, w->count, w->base_offset, w->last_delta, w->base_ts, w->log_append,
                        w->max_ts, w->from, w->until, s);
}

PyDoc_STRVAR(decode_section_doc,
"decode_section(section, count, base_offset, last_offset_delta, base_timestamp,\n"
"               log_append_time, max_timestamp,\n"
"               from_offset, until_offset, headers=False) -> columns\n\n"
"The records of one (decompressed) records section, as decode()'s columns.");

static PyObject *
decode_section(PyObject *self, PyObject *args)
{
    Py_buffer view;
    int count, last_delta, log_append, headers = 0;
    long long base_offset, base_ts, max_ts, from, until;
    if (!PyArg_ParseTuple(args, "y*iLiLpLLL|p", &view, &count, &base_offset, &last_delta, &base_ts,
                          &log_append, &max_ts, &from, &until, &headers))
        return NULL;
    SectionWalk w = {view.buf, view.len, count, last_delta, base_offset, base_ts, max_ts, from, until,
                     log_append};
    Sink counted;
    memset(&counted, 0, sizeof counted);
    counted.headers = headers;
    PyObject *result = NULL;
    if (section_walk(&w, &counted) == 0)
        result = columns(section_walk, &w, &counted);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS, decode_doc},
    {"decode_section", decode_section, METH_VARARGS, decode_section_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_csource",
    "Fetch record batches decoded into Arrow buffers (kref/spark/native_source.py).", -1, methods,
};

PyMODINIT_FUNC
PyInit__csource(void)
{
    return PyModule_Create(&module);
}
