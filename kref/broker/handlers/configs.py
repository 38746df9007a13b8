"""DescribeConfigs (32, v1-v4), AlterConfigs (33, v0-v2) and IncrementalAlterConfigs (44, v0-v1).

Theory of operation: a topic's effective config is its overrides
(DYNAMIC_TOPIC_CONFIG) over the broker's defaults, which come from
server.properties (STATIC_BROKER_CONFIG when set there, DEFAULT_CONFIG when
embedded). `synonyms` (KIP-226) list that chain, most specific first.
IncrementalAlterConfigs (KIP-339) applies SET / DELETE / APPEND / SUBTRACT
to the topic overrides, validates the result as a whole and only then
stores it, so a rejected request changes nothing. The older AlterConfigs
(still what kafkajs' alterConfigs and aiokafka's alter_configs send) has
replace semantics: the configs listed become the topic's whole override set,
and every override not listed goes back to the broker default.

Broker resources: DescribeConfigs gives every broker setting with its real
Kafka type (INT, LONG, STRING, LIST, ...), read_only unless it is dynamic,
and its source (dynamic per broker, dynamic cluster default, static,
default); the resource "" describes the cluster-wide dynamic defaults. Both
alter APIs change the dynamic broker configs (kref/broker/dynamic_config.py)
of resource "<node id>" or "" with the same semantics as for topics; a
static setting is refused with INVALID_REQUEST, as Kafka does.
"""

from __future__ import annotations

from collections import Counter

from kref.broker.broker import BrokerError
from kref.broker.config import TOPIC_CONFIG_SYNONYMS, broker_config_type_id, is_dynamic_broker_property, is_secret
from kref.broker.dynamic_config import CLUSTER_DEFAULT, SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG
from kref.broker.topic_configs import LIST_CONFIGS, config_type_id, is_topic_config
from kref.protocol.codec import response_class
from kref.protocol.errors import ErrorCode
from kref.protocol.messages import build, nested

DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
INCREMENTAL_ALTER_CONFIGS = 44

# ConfigResource.Type
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
# DescribeConfigsResponse.ConfigSource
SOURCE_DYNAMIC_TOPIC_CONFIG = 1
SOURCE_STATIC_BROKER_CONFIG = 4
SOURCE_DEFAULT_CONFIG = 5
# IncrementalAlterConfigs operations
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


def register(router, broker) -> None:
    router.register(DESCRIBE_CONFIGS, 1, 4, handle_describe_configs)
    router.register(ALTER_CONFIGS, 0, 2, handle_alter_configs)
    router.register(INCREMENTAL_ALTER_CONFIGS, 0, 1, handle_incremental_alter_configs)


def topic_config_entries(broker, topic: str, overrides: dict[str, str], keys=None, *, include_synonyms=False):
    """Effective topic configs as dicts of DescribeConfigs/CreateTopics fields."""
    defaults = broker.default_log_config.to_properties()
    names = sorted(set(defaults) | set(overrides))
    entries = []
    for name in names:
        if keys is not None and name not in keys:
            continue
        broker_name = TOPIC_CONFIG_SYNONYMS.get(name)
        broker_source = _broker_chain(broker, broker_name)[0][2] if broker_name is not None else SOURCE_DEFAULT_CONFIG
        synonyms = []
        if name in overrides:
            value, source = overrides[name], SOURCE_DYNAMIC_TOPIC_CONFIG
            synonyms.append((name, value, source))
        else:
            value, source = defaults.get(name), broker_source
        if name in defaults and broker_name is not None:
            synonyms.append((broker_name, defaults[name], broker_source))
        entries.append(
            dict(
                name=name,
                value=value,
                read_only=False,
                config_source=source,
                is_sensitive=False,
                synonyms=synonyms if include_synonyms else [],
                config_type=config_type_id(name),
                documentation=None,
            )
        )
    return entries


def _broker_chain(broker, name: str) -> list[tuple[str, str | None, int]]:
    """The synonym chain of one broker property, most specific first (never empty)."""
    static = broker.static_config.to_properties()
    chain = broker.dynamic_configs.synonyms(name, static.get(name), _DEFAULTS.get(name))
    return chain or [(name, None, SOURCE_DEFAULT_CONFIG)]


def _builtin_defaults() -> dict[str, str]:
    import dataclasses

    from kref.broker.config import BrokerConfig

    return {
        f.metadata["name"]: f.metadata["default"]
        for f in dataclasses.fields(BrokerConfig)
        if "name" in f.metadata and f.metadata["default"] is not None
    }


_DEFAULTS = _builtin_defaults()


def broker_config_entries(broker, keys=None, *, include_synonyms=False, resource_name: str | None = None):
    entries = []
    if resource_name == CLUSTER_DEFAULT:
        # The cluster-wide dynamic defaults, and only those (as Kafka describes resource "").
        items = [(n, v, [(n, v, SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG)]) for n, v in sorted(broker.dynamic_configs.of(CLUSTER_DEFAULT).items())]
    else:
        items = [(n, v, _broker_chain(broker, n)) for n, v in sorted(broker.config.to_properties().items())]
    for name, value, chain in items:
        if keys is not None and name not in keys:
            continue
        secret = is_secret(name)
        entries.append(
            dict(
                name=name,
                value=None if secret else value,
                read_only=not is_dynamic_broker_property(name),
                config_source=chain[0][2],
                is_sensitive=secret,
                synonyms=[(n, None if secret else v, src) for n, v, src in chain] if include_synonyms else [],
                config_type=broker_config_type_id(name),
                documentation=None,
            )
        )
    return entries


def _check_broker_resource(broker, resource_name: str) -> None:
    if resource_name not in ("", str(broker.node_id)):
        raise BrokerError(
            ErrorCode.INVALID_REQUEST,
            f"Unexpected broker id, expected {broker.node_id} or empty string, but received {resource_name}",
        )


async def handle_describe_configs(ctx, request):
    broker = ctx.broker
    response_type = response_class(DESCRIBE_CONFIGS, ctx.api_version)
    result_type = nested(response_type, "DescribeConfigsResult")
    entry_type = nested(response_type, "DescribeConfigsResourceResult")
    synonym_type = nested(response_type, "DescribeConfigsSynonym")
    include_synonyms = bool(getattr(request, "include_synonyms", False))
    results = []
    for resource in request.resources:
        keys = set(resource.configuration_keys) if resource.configuration_keys is not None else None
        try:
            if resource.resource_type == RESOURCE_TOPIC:
                topic = broker.get_topic(resource.resource_name)
                if topic is None:
                    raise BrokerError(
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
                    )
                entries = topic_config_entries(
                    broker, topic.name, topic.configs, keys, include_synonyms=include_synonyms
                )
            elif resource.resource_type == RESOURCE_BROKER:
                _check_broker_resource(broker, resource.resource_name)
                entries = broker_config_entries(
                    broker, keys, include_synonyms=include_synonyms, resource_name=resource.resource_name
                )
            else:
                raise BrokerError(
                    ErrorCode.INVALID_REQUEST, f"Unsupported resource type {resource.resource_type} in kref"
                )
            configs = tuple(
                build(
                    entry_type,
                    **{
                        **e,
                        "synonyms": tuple(
                            build(synonym_type, name=n, value=v, source=s) for n, v, s in e["synonyms"]
                        ),
                    },
                )
                for e in entries
            )
            outcome = dict(error_code=ErrorCode.NONE, error_message=None, configs=configs)
        except BrokerError as exc:
            outcome = dict(error_code=exc.error_code, error_message=str(exc), configs=())
        results.append(
            build(
                result_type,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                **outcome,
            )
        )
    return build(response_type, results=tuple(results))


def apply_incremental_ops(
    current: dict[str, str], ops, defaults: dict[str, str], *, topic: bool = True, list_configs=LIST_CONFIGS
) -> dict[str, str]:
    """KIP-339 semantics on a topic's (or broker's) overrides; raises BrokerError."""
    names = Counter(op.name for op in ops)
    duplicates = sorted(n for n, c in names.items() if c > 1)
    if duplicates:
        raise BrokerError(ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys: {', '.join(duplicates)}")
    result = dict(current)
    kind = "topic" if topic else "broker"
    for op in ops:
        if topic and not is_topic_config(op.name):
            raise BrokerError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {op.name}")
        if op.config_operation == OP_SET:
            if op.value is None:
                raise BrokerError(ErrorCode.INVALID_CONFIG, f"Null value not supported for {kind} config {op.name}")
            result[op.name] = op.value
        elif op.config_operation == OP_DELETE:
            result.pop(op.name, None)
        elif op.config_operation in (OP_APPEND, OP_SUBTRACT):
            if op.name not in list_configs:
                verb = "append" if op.config_operation == OP_APPEND else "subtract"
                raise BrokerError(ErrorCode.INVALID_CONFIG, f"Config value {verb} is not allowed for config key: {op.name}")
            base = result.get(op.name, defaults.get(op.name, ""))
            items = [v for v in base.split(",") if v]
            changes = [v.strip() for v in (op.value or "").split(",") if v.strip()]
            if op.config_operation == OP_APPEND:
                items += [v for v in changes if v not in items]
            else:
                items = [v for v in items if v not in changes]
            result[op.name] = ",".join(items)
        else:
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {op.config_operation}")
    return result


def replace_configs(configs, *, topic: bool = True) -> dict[str, str]:
    """AlterConfigs semantics: the listed configs are the new override set."""
    names = Counter(c.name for c in configs)
    duplicates = sorted(n for n, c in names.items() if c > 1)
    if duplicates:
        raise BrokerError(ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys: {', '.join(duplicates)}")
    result = {}
    kind = "topic" if topic else "broker"
    for c in configs:
        if topic and not is_topic_config(c.name):
            raise BrokerError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {c.name}")
        if c.value is None:
            raise BrokerError(ErrorCode.INVALID_CONFIG, f"Null value not supported for {kind} config {c.name}")
        result[c.name] = c.value
    return result


async def handle_alter_configs(ctx, request):
    return await _alter_resources(
        ctx,
        request,
        ALTER_CONFIGS,
        lambda topic, resource: replace_configs(resource.configs),
        lambda resource: replace_configs(resource.configs, topic=False),
    )


_BROKER_LIST_CONFIGS = frozenset({"log.cleanup.policy"})


async def handle_incremental_alter_configs(ctx, request):
    broker = ctx.broker
    defaults = broker.default_log_config.to_properties()
    return await _alter_resources(
        ctx,
        request,
        INCREMENTAL_ALTER_CONFIGS,
        lambda topic, resource: apply_incremental_ops(topic.configs, resource.configs, defaults),
        lambda resource: apply_incremental_ops(
            broker.dynamic_configs.of(resource.resource_name),
            resource.configs,
            broker.config.to_properties(),
            topic=False,
            list_configs=_BROKER_LIST_CONFIGS,
        ),
    )


def _raise_unless_none(answer: tuple[int, str | None]) -> None:
    code, message = answer
    if code != ErrorCode.NONE:
        raise BrokerError(code, message or ErrorCode(code).name)


async def _alter_resources(ctx, request, api_key: int, new_topic_configs, new_broker_configs):
    """The shared body of both alter APIs; `new_topic_configs(topic, resource)` and
    `new_broker_configs(resource)` compute the new override set or raise BrokerError."""
    broker = ctx.broker
    response_type = response_class(api_key, ctx.api_version)
    result_type = nested(response_type, "AlterConfigsResourceResponse")
    counts = Counter((r.resource_type, r.resource_name) for r in request.resources)
    results = []
    for resource in request.resources:
        try:
            if counts[(resource.resource_type, resource.resource_name)] > 1:
                raise BrokerError(ErrorCode.INVALID_REQUEST, "Duplicate resource in request.")
            if resource.resource_type == RESOURCE_TOPIC:
                topic = broker.get_topic(resource.resource_name)
                if topic is None:
                    raise BrokerError(
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
                    )
                new = new_topic_configs(topic, resource)
                view = getattr(broker, "kraft", None)
                if view is not None and view.is_cluster_topic(topic.name):
                    # A KRaft cluster topic: the active controller writes ConfigRecords
                    # that every broker applies (kref/node/broker_view.py).
                    cleaned = broker.validate_topic_configs(new)
                    if not request.validate_only:
                        _raise_unless_none(await view.alter_topic_configs(topic.name, cleaned))
                else:
                    broker.alter_topic_configs(topic.name, new, validate_only=request.validate_only)
            elif resource.resource_type == RESOURCE_BROKER:
                _check_broker_resource(broker, resource.resource_name)
                new = new_broker_configs(resource)
                view = getattr(broker, "kraft", None)
                if view is not None:
                    # KIP-226 in the cluster: checked here, written by the active
                    # controller as ConfigRecords, applied by every broker.
                    broker.alter_broker_configs(resource.resource_name, new, validate_only=True)
                    if not request.validate_only:
                        _raise_unless_none(await view.alter_broker_configs(resource.resource_name, new))
                else:
                    broker.alter_broker_configs(resource.resource_name, new, validate_only=request.validate_only)
            else:
                raise BrokerError(
                    ErrorCode.INVALID_REQUEST, f"Unsupported resource type {resource.resource_type} in kref"
                )
            outcome = dict(error_code=ErrorCode.NONE, error_message=None)
        except BrokerError as exc:
            outcome = dict(error_code=exc.error_code, error_message=str(exc))
        results.append(
            build(
                result_type,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                **outcome,
            )
        )
    return build(response_type, responses=tuple(results))
