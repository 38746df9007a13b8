/* The compiled record walker: produce validation's record check in C.

Theory of operation. kref/records/walker.py's check_records_python (the
pure-Python reference, with numpy) decides whether exactly `count` well-formed v2 records
fill a records section: every record's length varint, attributes, timestamp
delta varlong, offset delta (which must be 0..count-1 in order), key and value
lengths inside their record, a non-negative header count and header key
lengths, every header inside its record, and each record ending exactly where
its length says; the section ends after the last record. This file answers
the same question in one sequential pass over the bytes, a few nanoseconds
per record instead of the reference's 90-160 ns, with no copy of the section
(it reads any contiguous buffer).

check_framing does the same for framing_validation.py's lighter walk of
small batches (lengths and offset deltas only), so that a batch gets the same
verdict whether this file is built or not.

Both only say yes or no. On no, the Python caller runs the reference, which
raises the InvalidRecordError naming the first bad record, so every message
comes from one place. tests/records/test_cwalker.py checks that both accept
exactly the same inputs (valid, truncated, oversized, negative-varint,
corrupt and randomized sections).

Varints follow Kafka's ByteUtils as kref/records/varint.py does: at most 5
bytes (int32) or 10 (int64), bits past 32/64 dropped, zigzag decoded, and
never read at or past the end they are bounded by.

Built by scripts/build_cwalker.py (scripts/setup.sh runs it); kref works
without it (the broker logs one line saying so at start).
*/

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_cvarint.h"

/* 0: exactly `count` well-formed records fill d[0:end]; 1: they do not. */
static int
walk(const uint8_t *d, Py_ssize_t end, long long count)
{
    Py_ssize_t pos = 0, p, rend;
    int64_t length, v, n_headers;
    /* As the reference: nothing to walk for 0, and a negative count is left to
       it (the batch header check refuses both before either walk runs). */
    if (count == 0)
        return 0;
    if (count < 0)
        return 1;
    for (long long i = 0; i < count; i++) {
        if (pos >= end || read_varint(d, pos, end, 5, &length, &p) || length < 3)
            return 1;
        if (length > end - p)
            return 1;
        rend = p + length;
        p += 1; /* attributes: any value (Kafka ignores record attributes) */
        if (read_varint(d, p, rend, 10, &v, &p)) /* timestamp delta */
            return 1;
        if (read_varint(d, p, rend, 5, &v, &p) || v != i) /* offset delta */
            return 1;
        for (int field = 0; field < 2; field++) { /* key, value: -1 (or below) is null */
            if (read_varint(d, p, rend, 5, &v, &p) || v > rend - p)
                return 1;
            if (v > 0)
                p += v;
        }
        if (read_varint(d, p, rend, 5, &n_headers, &p) || n_headers < 0)
            return 1;
        /* Each header takes at least two bytes of the record, so this loop
           ends within the record's length. */
        for (int64_t h = 0; h < n_headers; h++) {
            if (read_varint(d, p, rend, 5, &v, &p) || v < 0 || v > rend - p)
                return 1;
            p += v;
            if (read_varint(d, p, rend, 5, &v, &p) || v > rend - p)
                return 1;
            if (v > 0)
                p += v;
        }
        if (p != rend)
            return 1;
        pos = rend;
    }
    return pos != end;
}

/* kref/records/framing_validation.py's _walk_records, for batches below
   VECTOR_MIN_RECORDS records: only each record's length, timestamp delta
   (skipped as that loop skips it: at most 10 continuation bytes, then one
   more) and offset delta. 0: accepted; 1: not. */
static int
walk_framing(const uint8_t *d, Py_ssize_t end, long long count)
{
    Py_ssize_t pos = 0, p, rend, stop;
    int64_t length, v;
    for (long long i = 0; i < count; i++) {
        if (pos + 1 >= end || read_varint(d, pos, end, 5, &length, &p) || length < 3 || length > end - p)
            return 1;
        rend = p + length;
        p += 1; /* attributes */
        stop = p + 10 < rend ? p + 10 : rend;
        while (p < stop && d[p] >= 0x80)
            p++;
        p++;
        if (p >= rend || read_varint(d, p, rend, 5, &v, &p) || v != i)
            return 1;
        pos = rend;
    }
    return pos != end;
}

static PyObject *
run(PyObject *args, const char *format, int (*walker)(const uint8_t *, Py_ssize_t, long long))
{
    Py_buffer buf;
    long long count;
    int bad;
    if (!PyArg_ParseTuple(args, format, &buf, &count))
        return NULL;
    bad = walker((const uint8_t *)buf.buf, buf.len, count);
    PyBuffer_Release(&buf);
    if (bad)
        Py_RETURN_FALSE;
    Py_RETURN_TRUE;
}

static PyObject *
check_records(PyObject *self, PyObject *args)
{
    return run(args, "y*L:check_records", walk);
}

static PyObject *
check_framing(PyObject *self, PyObject *args)
{
    return run(args, "y*L:check_framing", walk_framing);
}

static PyMethodDef methods[] = {
    {"check_records", check_records, METH_VARARGS,
     "check_records(section, count) -> bool: whether exactly `count` well-formed v2 records, "
     "with offset deltas 0..count-1, fill the section (kref/records/walker.py's check_records decides alike)."},
    {"check_framing", check_framing, METH_VARARGS,
     "check_framing(section, count) -> bool: what kref/records/framing_validation.py's _walk_records accepts."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cwalker",
    "The compiled record walker (see kref/records/_cwalker.c).", -1, methods,
};

PyMODINIT_FUNC
PyInit__cwalker(void)
{
    return PyModule_Create(&module);
}
