"""Step 3 of the example pipeline: print the aggregated totals from kref.

Reads `page-totals` from the beginning with a plain Kafka consumer, keeps the
latest value per key (the topic is a changelog of totals) and prints the
table when no new record has arrived for --idle seconds.

    python examples/spark_pipeline/print_results.py --bootstrap 127.0.0.1:9092
"""

from __future__ import annotations

import argparse
import json
import time

from confluent_kafka import Consumer, TopicPartition


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--topic", default="page-totals")
    parser.add_argument("--idle", type=float, default=3.0)
    args = parser.parse_args()

    consumer = Consumer(
        {"bootstrap.servers": args.bootstrap, "group.id": "page-totals-printer",
         "enable.auto.commit": False}
    )
    partitions = consumer.list_topics(args.topic, timeout=10).topics[args.topic].partitions
    consumer.assign([TopicPartition(args.topic, p, 0) for p in partitions])
    latest: dict[str, dict] = {}
    records = 0
    last_seen = time.monotonic()
    while time.monotonic() - last_seen < args.idle:
        for msg in consumer.consume(500, 0.5):
            if msg.error() is None:
                latest[msg.key().decode()] = json.loads(msg.value())
                records += 1
                last_seen = time.monotonic()
    consumer.close()
    print(f"{records} update(s) read from '{args.topic}'; latest totals:")
    print(f"{'page':<12} {'events':>8} {'amount':>10}")
    for page, total in sorted(latest.items()):
        print(f"{page:<12} {total['events']:>8} {total['amount']:>10.2f}")


if __name__ == "__main__":
    main()
