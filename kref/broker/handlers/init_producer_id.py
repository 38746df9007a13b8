"""InitProducerId (API key 22, v0-v5): a fresh producer id for an idempotent producer.

Theory of operation
-------------------
An idempotent producer (enable.idempotence=true, KIP-98) asks once for a
producer id and starts at epoch 0 and sequence 0 in every partition; the
partition logs' ProducerStateManagers then drop its retried batches as
duplicates and reject gaps. Ids come from ProducerIdManager in blocks the
controller grants through the metadata log (KIP-730), so no id is handed out
twice, across brokers and restarts. While no block can be had (no active
controller yet), the answer is COORDINATOR_LOAD_IN_PROGRESS, which clients
retry, as Kafka answers.

Like Kafka for a producer without transactional.id, every call gets a new id
with epoch 0, also when the request names its previous id and epoch
(KIP-360): the fresh id resets all sequence state. kref has no transaction
coordinator yet, so a transactional.id is refused with a fatal error
(group_area.TRANSACTIONS_REFUSED says why that one).
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from kref.broker.group_area import TRANSACTIONS_REFUSED, install, producer_id_manager
from kref.broker.handlers._responses import build, error, response_types
from kref.coordinator import group as g
from kref.coordinator.producer_id import ProducerIdUnavailable
from kref.protocol.errors import ErrorCode

INIT_PRODUCER_ID = 22
_ZERO = datetime.timedelta(0)

log = logging.getLogger(__name__)


async def init_producer_id(ctx, request) -> Any:
    types = response_types(INIT_PRODUCER_ID, ctx.api_version)
    if request.transactional_id is not None:
        return build(types.InitProducerIdResponse, throttle_time=_ZERO,
                     error_code=error(TRANSACTIONS_REFUSED), producer_id=-1, producer_epoch=-1)
    try:
        producer_id = await producer_id_manager(ctx.broker).generate_producer_id()
    except ProducerIdUnavailable as exc:
        log.info("no producer id block yet: %s", exc)
        return build(types.InitProducerIdResponse, throttle_time=_ZERO,
                     error_code=error(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS), producer_id=-1, producer_epoch=-1)
    except Exception:
        log.exception("cannot allocate a producer id")
        return build(types.InitProducerIdResponse, throttle_time=_ZERO,
                     error_code=error(g.Errors.UNKNOWN_SERVER_ERROR), producer_id=-1, producer_epoch=-1)
    return build(types.InitProducerIdResponse, throttle_time=_ZERO, error_code=error(g.Errors.NONE),
                 producer_id=producer_id, producer_epoch=0)


def register(router, broker) -> None:
    install(broker)
    router.register(INIT_PRODUCER_ID, 0, 5, init_producer_id)
