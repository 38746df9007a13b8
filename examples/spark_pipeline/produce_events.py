"""Step 1 of the example pipeline: produce page-view events to a kref topic.

Creates the topics `events` (3 partitions) and `page-totals` (2 partitions)
if they do not exist, then produces JSON events keyed by user with acks=all.
A real Kafka client (confluent-kafka) does the work: kref needs nothing else.

    python examples/spark_pipeline/produce_events.py --bootstrap 127.0.0.1:9092 --count 1000
"""

from __future__ import annotations

import argparse
import json
import random
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

PAGES = ["/", "/search", "/product", "/cart", "/checkout"]


def ensure_topics(bootstrap: str, topics: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=10).topics
    new = [NewTopic(name, n, 1) for name, n in topics.items() if name not in existing]
    if not new:
        return
    for name, future in admin.create_topics(new).items():
        future.result(timeout=30)
        print(f"created topic {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    ensure_topics(args.bootstrap, {"events": 3, "page-totals": 2})
    rng = random.Random(args.seed)
    producer = Producer({"bootstrap.servers": args.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(args.count):
        event = {
            "user": f"user-{rng.randrange(50)}",
            "page": rng.choice(PAGES),
            "amount": round(rng.uniform(1, 100), 2) if rng.random() < 0.3 else 0.0,
            "ts_ms": int(time.time() * 1000),
        }
        producer.produce("events", key=event["user"].encode(), value=json.dumps(event).encode())
        if i % 1000 == 0:
            producer.poll(0)
    left = producer.flush(30)
    if left:
        raise SystemExit(f"{left} events not acknowledged")
    print(f"produced {args.count} events to 'events' on {args.bootstrap}")


if __name__ == "__main__":
    main()
