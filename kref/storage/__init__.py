"""kref.storage: Kafka's on-disk log, byte-compatible (segments, indexes,
leader-epoch cache, checkpoints), with recovery and retention.

Entry points: kref.storage.log (Log, LogConfig, AppendInfo, FetchDataInfo),
kref.storage.log_manager (LogManager), kref.storage.checkpoint.
"""
