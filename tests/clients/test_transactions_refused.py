"""A transactional producer is refused at once, with a fatal error, by every client.

kref has no transaction coordinator (KIP-98 transactions are out of scope).
The refusal must be an error the clients treat as fatal: with a retriable
one (COORDINATOR_NOT_AVAILABLE) librdkafka's init_transactions() retries
until its timeout and aiokafka's start() never returns. The broker answers
FindCoordinator(key_type=TRANSACTION) and InitProducerId(transactional_id)
with TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53) and a message naming the
reason. Each client gets a generous timeout, so the assertion is on the
error's kind, not on time. An idempotent (non-transactional) producer keeps
working on the same broker.
"""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import KafkaException, Producer

TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
CLIENT_TIMEOUT_S = 30


def test_confluent_init_transactions_fails_fatally(kref_broker):
    p = Producer({"bootstrap.servers": kref_broker.bootstrap, "transactional.id": "tx-confluent"})
    with pytest.raises(KafkaException) as info:
        p.init_transactions(CLIENT_TIMEOUT_S)
    err = info.value.args[0]
    assert err.code() == TRANSACTIONAL_ID_AUTHORIZATION_FAILED, err
    assert err.fatal() and not err.retriable()
    assert "does not support transactions" in err.str()

    idempotent = Producer({"bootstrap.servers": kref_broker.bootstrap, "enable.idempotence": True})
    delivered = []
    idempotent.produce("after-tx", b"v", on_delivery=lambda e, m: delivered.append(e))
    assert idempotent.flush(CLIENT_TIMEOUT_S) == 0 and delivered == [None]


def test_kafka_python_init_transactions_fails_fatally(kref_broker):
    from kafka import KafkaProducer
    from kafka.errors import TransactionalIdAuthorizationFailedError

    p = KafkaProducer(bootstrap_servers=kref_broker.bootstrap, transactional_id="tx-kp",
                      max_block_ms=CLIENT_TIMEOUT_S * 1000)
    try:
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            p.init_transactions()
    finally:
        p.close(timeout=5)


def test_aiokafka_transactional_start_fails_fatally(kref_broker):
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import TransactionalIdAuthorizationFailed

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=kref_broker.bootstrap, transactional_id="tx-aio")
        try:
            with pytest.raises(TransactionalIdAuthorizationFailed):
                await asyncio.wait_for(p.start(), CLIENT_TIMEOUT_S)
        finally:
            await p.stop()

    asyncio.run(run())
