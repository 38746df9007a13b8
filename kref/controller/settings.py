"""KRaft settings: the consistency checks Kafka makes at start, and the derived views.

Theory of operation
-------------------
The KRaft properties (process.roles, node.id, controller.quorum.voters,
controller.listener.names, listeners, inter.broker.listener.name, and the
timeouts) are parsed one by one in kref.broker.config; whether they make a
node that can run is a question about all of them together, answered here
once, at start, before anything touches the disk. Each failed check is a
ConfigError whose message names the properties involved; `kref broker`
prints it on one line and exits 2. The checks are Kafka's (KafkaConfig's
KRaft validation): a controller must be a voter and must have a controller
listener among its listeners; a broker-only node must not be a voter, must
not listen on a controller listener, and must know the voters; a
controller-only node serves no client listener; the inter-broker listener
is a client listener; a heartbeat interval shorter than the session timeout.

Without process.roles a node is kref's single-node broker: a combined
node that is the only voter of its own quorum (`single_node_voters`),
needing no controller listener and no format step.
"""

from __future__ import annotations

from typing import Any

from kref.broker.config import ConfigError, Voter


def check_kraft(values: dict[str, Any]) -> None:
    roles = values["process_roles"]
    node_id = values["node_id"]
    voters: tuple[Voter, ...] = values["controller_quorum_voters"]
    controller_names = set(values["controller_listener_names"])
    listener_names = [lst.name for lst in values["listeners"]]
    if values["broker_heartbeat_interval_ms"] >= values["broker_session_timeout_ms"]:
        raise ConfigError(
            f"broker.heartbeat.interval.ms ({values['broker_heartbeat_interval_ms']}) must be less than "
            f"broker.session.timeout.ms ({values['broker_session_timeout_ms']})"
        )
    if values["controller_quorum_fetch_timeout_ms"] < values["controller_quorum_election_timeout_ms"]:
        raise ConfigError(
            "controller.quorum.fetch.timeout.ms must not be less than controller.quorum.election.timeout.ms"
        )
    if len(set(listener_names)) != len(listener_names):
        raise ConfigError(f"listeners: a listener name appears twice in {','.join(listener_names)}")
    if roles is None:
        if voters:
            raise ConfigError("controller.quorum.voters is set but process.roles is not (set process.roles)")
        return
    if not controller_names:
        raise ConfigError("controller.listener.names must be set when process.roles is set")
    bootstrap = values["controller_quorum_bootstrap_servers"]
    if not voters and len(bootstrap) == 1 and "controller" in roles:
        # Kafka's sample server.properties with one bootstrap controller is a
        # standalone quorum (kafka-storage format --standalone): this node
        # is its only voter, reached at that address.
        host, _, port = bootstrap[0].rpartition(":")
        if not port.isdigit():
            raise ConfigError(f"controller.quorum.bootstrap.servers: {bootstrap[0]!r} is not host:port")
        voters = values["controller_quorum_voters"] = (Voter(node_id, host, int(port)),)
    if not voters:
        raise ConfigError(
            "controller.quorum.voters must list the controllers as id@host:port,... "
            "(kref runs static quorums; controller.quorum.bootstrap.servers of KIP-853 is not supported)"
        )
    voter_ids = {v.node_id for v in voters}
    inter_broker = values["inter_broker_listener_name"]
    if "controller" in roles:
        if node_id not in voter_ids:
            raise ConfigError(
                f"process.roles has controller, so node.id {node_id} must be one of controller.quorum.voters "
                f"({','.join(str(v) for v in voters)})"
            )
        if not controller_names & set(listener_names):
            raise ConfigError(
                f"controller.listener.names ({','.join(sorted(controller_names))}) must name one of the listeners "
                f"({','.join(listener_names)}) on a node with the controller role"
            )
    if roles == ("controller",):
        clients = [n for n in listener_names if n not in controller_names]
        if clients:
            raise ConfigError(
                f"listeners of a controller-only node must all be controller listeners; {','.join(clients)} is not"
            )
    if "broker" in roles:
        if roles == ("broker",):
            if node_id in voter_ids:
                raise ConfigError(
                    f"process.roles is broker only, so node.id {node_id} must not be one of controller.quorum.voters"
                )
            used = controller_names & set(listener_names)
            if used:
                raise ConfigError(
                    f"listeners of a broker-only node must not include the controller listener {','.join(sorted(used))}"
                )
        clients = [n for n in listener_names if n not in controller_names]
        if inter_broker is not None:
            if inter_broker.upper() in controller_names:
                raise ConfigError(f"inter.broker.listener.name {inter_broker} must not be a controller listener")
            if inter_broker.upper() not in clients:
                raise ConfigError(
                    f"inter.broker.listener.name {inter_broker} is not one of the listeners ({','.join(clients)})"
                )
        advertised = values.get("advertised_listeners") or ()
        for lst in advertised:
            if lst.name in controller_names and roles == ("broker",):
                raise ConfigError(f"advertised.listeners must not include the controller listener {lst.name}")


def single_node_voters(node_id: int) -> tuple[Voter, ...]:
    """The quorum of the single-node broker: itself, reached without a network."""
    return (Voter(node_id, "", 0),)


def metadata_log_dir(config) -> str:
    """metadata.log.dir, defaulting to the first of log.dirs (as Kafka)."""
    return config.metadata_log_dir or config.log_dirs[0]


def all_log_dirs(config) -> list[str]:
    """Every dir that carries a meta.properties: log.dirs and metadata.log.dir."""
    dirs = list(config.log_dirs)
    meta = metadata_log_dir(config)
    if meta not in dirs:
        dirs.append(meta)
    return dirs
