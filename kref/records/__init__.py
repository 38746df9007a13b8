"""kref.records: Kafka's message formats, byte for byte.

header.py (the v2 batch header, read and stamped in place), batch.py (whole
v2 batches), compression.py (the four codecs with Kafka's framings and a hard
decompression bound), control.py (transaction markers), legacy.py (message
sets v0/v1), memory_records.py (mixed-format buffers), validation.py and
framing_validation.py (the produce path), errors.py (the CorruptRecordError
family). docs/records.md tells the whole story.
"""
