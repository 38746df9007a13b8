"""`kref broker --config F` for a node with process.roles: the KRaft node runner.

Theory of operation
-------------------
A node configured with process.roles runs what its roles name, as
kafka-server-start does:

- `controller`: a voter of the quorum (RaftNode), serving Vote,
  BeginQuorumEpoch, EndQuorumEpoch, Fetch of `__cluster_metadata-0` and
  DescribeQuorum on its CONTROLLER listener;
- `broker`: the broker on its client listeners; a broker-only node follows
  the metadata log as an observer (a RaftNode that never votes);
- `broker,controller`: both in one process, sharing one RaftNode.

Start-up refuses, with one line and exit 2, an inconsistent configuration
(kref/controller/settings.py) and log dirs that are unformatted, of another
cluster or node, or garbled (meta_properties.py), before anything is
written. SIGTERM/SIGINT stop the node: a broker first shuts down under
control (its heartbeats say want_shut_down until the controller has moved
its leaderships away and answers should_shut_down, at most
broker.session.timeout.ms), then a quorum leader resigns (EndQuorumEpoch),
then the logs are closed. A SIGKILL skips that; the next start
recovers the metadata log and reads quorum-state.

What the metadata log carries today is the quorum's own LeaderChange
records; the controller (broker registration, topics) writes the rest.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import Any

import trio

from kref.broker.config import BrokerConfig, ConfigError

log = logging.getLogger("kref.node")


class ControllerEndpoint:
    """What kref.broker.server's connection handler needs from its owner."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self.open_connections = 0


async def serve_controller_listener(endpoint: ControllerEndpoint, router, *, task_status=trio.TASK_STATUS_IGNORED):
    from kref.broker.server import ListenError, handle_connection

    listeners = endpoint.config.controller_listeners
    bound = []
    async with trio.open_nursery() as nursery:
        for listener in listeners:
            try:
                sockets = await trio.open_tcp_listeners(listener.port, host=listener.host or None)
            except OSError as exc:
                raise ListenError(f"cannot listen on {listener}: {exc.strerror or exc}") from None
            bound.append(listener)

            async def handler(stream, name=listener.name):
                if endpoint.open_connections >= endpoint.config.max_connections:
                    await stream.aclose()
                    return
                endpoint.open_connections += 1
                try:
                    await handle_connection(stream, endpoint, router, name)
                finally:
                    endpoint.open_connections -= 1

            nursery.start_soon(trio.serve_listeners, handler, sockets)
            log.info("node %d: controller listener %s", endpoint.node_id, listener)
        task_status.started(bound)


def run(args: Any, config: BrokerConfig) -> int:
    """Run a node with process.roles; the exit status."""
    from kref.broker.router import Router
    from kref.broker.server import ListenError, leaf_exceptions
    from kref.storage import meta_properties
    from kref.node.raft_driver import RaftNode
    from kref.broker.gc_tuning import freeze_startup_heap
    from kref.controller.settings import all_log_dirs, metadata_log_dir

    trace_sink = None
    broker = None
    client_router = None
    try:
        cluster_id = meta_properties.ensure_formatted(all_log_dirs(config), config.node_id, require_formatted=True)
        if "broker" in config.process_roles:
            from kref.broker.broker import Broker
            from kref.broker.handlers import register_all

            broker = Broker(config, trace_file=args.trace_file)
            client_router = Router()
            register_all(client_router, broker)
            broker.open()
        if args.trace_file and broker is None:
            from kref.trace import NdjsonTraceSink

            trace_sink = NdjsonTraceSink(args.trace_file)
        elif broker is not None:
            trace_sink = getattr(broker, "trace_sink", None)
        # KREF_QUORUM_JITTER_SEED makes the election jitter reproducible
        # (seeded fault tests); otherwise each start draws one.
        seed = os.environ.get("KREF_QUORUM_JITTER_SEED")
        raft = RaftNode(
            config, cluster_id, metadata_log_dir(config), trace_sink=trace_sink,
            jitter_seed=int(seed) if seed else None,
        )
    except ConfigError as exc:
        print(f"kref broker: invalid configuration: {exc}", file=sys.stderr)
        return 2
    controller_router = Router()
    raft.register(controller_router)
    endpoint = ControllerEndpoint(config)
    from kref.node.controller_driver import BrokerLifecycle, ControllerDriver

    controller = None
    if "controller" in config.process_roles:
        controller = ControllerDriver(raft, config, trace_sink)
        controller.register(controller_router)
    lifecycle = BrokerLifecycle(raft, config, broker.config.advertised) if broker is not None else None
    if broker is not None:
        from kref.broker.producer_id_driver import ProducerIdManager

        # KIP-730: producer ids come in blocks from the active controller.
        broker.use_producer_id_manager(ProducerIdManager(lifecycle.allocate_producer_ids))
    if broker is not None:
        from kref.node.broker_view import ClusterView

        from kref.broker.replica_fetcher import ReplicaFetcherManager

        view = ClusterView(raft, broker, lifecycle)  # hooks itself in as broker.kraft
        fetchers = ReplicaFetcherManager(broker, view)

    async def main() -> None:
        from kref.broker.loop_steps import install_from_env

        install_from_env()  # KREF_LOOP_STEPS: measure the event loop's longest steps (bench/kraft_failover.py)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                if config.controller_listeners and "controller" in config.process_roles:
                    await nursery.start(serve_controller_listener, endpoint, controller_router)
                await nursery.start(raft.run)
                if controller is not None:
                    await nursery.start(controller.run)
                if broker is not None:
                    from kref.broker.server import serve

                    await nursery.start(serve, broker, client_router)
                    await nursery.start(lifecycle.run)
                    await nursery.start(fetchers.run)
                # Serving: the start-up heap is built (kref/broker/gc_tuning.py).
                freeze_startup_heap()
                log.info(
                    "kref node %d started (process.roles %s, cluster.id %s)",
                    config.node_id, ",".join(config.process_roles), cluster_id,
                )
                from kref.broker.config import effective_config_lines

                # as the single broker does (kref/broker/main.py): what this node runs with
                effective = broker.config if broker is not None else config
                log.info("effective configuration:\n%s", "\n".join(effective_config_lines(effective)))
                async for signum in signals:
                    log.info("received %s, shutting down", signal.Signals(signum).name)
                    if lifecycle is not None:
                        with trio.move_on_after(config.broker_session_timeout_ms / 1000):
                            await lifecycle.controlled_shutdown()
                    raft.shutdown()
                    await trio.sleep(0.2)  # the EndQuorumEpoch requests leave before the senders stop
                    nursery.cancel_scope.cancel()
                    return

    status = 0
    try:
        trio.run(main)
    except* ListenError as group:
        # except* keeps the nursery nesting: print the leaves, not "Exceptions from Trio nursery".
        for exc in leaf_exceptions(group):
            print(f"kref broker: {exc}", file=sys.stderr)
        status = 1
    finally:
        raft.close()
        if broker is not None:
            broker.shutdown()
        if trace_sink is not None and broker is None:
            trace_sink.close()
        log.info("kref node %d stopped", config.node_id)
    return status


__all__ = ["run", "ControllerEndpoint", "serve_controller_listener"]

