/* Kafka's varints (ByteUtils), shared by kref's optional C extensions:
   kref/records/_cwalker.c and kref/spark/_csource.c. Zigzag encoded, at most
   5 bytes (int32) or 10 (int64), bits past 32/64 dropped, as
   kref/records/varint.py reads them. */

#ifndef KREF_CVARINT_H
#define KREF_CVARINT_H

#include <Python.h>
#include <stdint.h>

/* One zigzag varint of at most max_bytes bytes at pos, not reading at or past
   end. Returns 0 and sets *value and *next, or -1 (runs past end, or longer
   than max_bytes). */
static inline int
read_varint(const uint8_t *d, Py_ssize_t pos, Py_ssize_t end, int max_bytes,
            int64_t *value, Py_ssize_t *next)
{
    uint64_t result = 0;
    int shift = 0;
    Py_ssize_t limit = pos + max_bytes;
    if (limit > end)
        limit = end;
    while (pos < limit) {
        uint8_t b = d[pos++];
        result |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            if (max_bytes == 5)
                result &= 0xFFFFFFFFu;
            *value = (int64_t)((result >> 1) ^ (0 - (result & 1)));
            *next = pos;
            return 0;
        }
        shift += 7;
    }
    return -1;
}

#endif
