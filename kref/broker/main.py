"""`kref broker`: parse the configuration, open the broker, serve.

Theory of operation: config errors, and files the broker cannot start on
(a corrupt topic image, an unusable --trace-file), are reported as one
clear line and exit status 2, without a traceback. The effective
configuration is logged at start with secrets masked; `--log-level DEBUG`
adds one line per request (kref.request). Then the Broker recovers its
log dirs, every handler area registers on the router, and the trio server
runs until SIGTERM/SIGINT (clean shutdown with checkpoints).

Profiling: with KREF_CPROFILE=PREFIX in the environment the process
carries a cProfile profiler on the process CPU clock (not wall time: on a
shared machine a process waits for a core, and that wait is no cost of its
own); SIGUSR1 starts it, SIGUSR2 stops it and writes the stats to
PREFIX.PID. bench/cluster.py --cprofile profiles its measured runs so.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
import time

__all__ = ["add_arguments", "run"]

log = logging.getLogger("kref.broker")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", "-c", metavar="server.properties", help="Kafka-style broker properties file")
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a broker property, overriding the config file (repeatable)",
    )
    parser.add_argument("--trace-file", metavar="F", help="write replica-core trace events as NDJSON to F")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def run(args: argparse.Namespace) -> int:
    from kref.broker import malloc_tuning

    malloc_tuning.apply()
    prefix = os.environ.get("KREF_CPROFILE")
    if not prefix:
        return _run(args)
    import cProfile
    import signal

    profile = cProfile.Profile(time.process_time)

    def start(*_):
        profile.enable()

    def stop(*_):
        profile.disable()
        profile.dump_stats(f"{prefix}.{os.getpid()}")

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    # kio's phantom types register hypothesis strategies when hypothesis is
    # importable (it is, in a test environment), which costs the broker
    # process seconds of start-up for nothing; block that optional import.
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    import trio

    from kref.broker.broker import Broker
    from kref.broker.config import BrokerConfig, ConfigError, StartupError, effective_config_lines
    from kref.broker.handlers import register_all
    from kref.broker.router import Router
    from kref.broker.server import ListenError, leaf_exceptions, run_broker
    from kref.trace.sink import TraceFileError

    logging.basicConfig(
        level=args.log_level,
        stream=sys.stderr,
        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s",
    )
    try:
        config = BrokerConfig.load(args.config, args.override, log=log.info)
        if config.process_roles is not None:
            # A KRaft node (kref/node/node.py): runs the roles it names.
            from kref.node.node import run as run_node

            return run_node(args, config)
        broker = Broker(config, trace_file=args.trace_file)
        router = Router()
        register_all(router, broker)
        broker.open()
        # Kafka logs its effective configuration at start ("KafkaConfig
        # values"), secrets masked: what the broker runs with (dynamic
        # configs included), once it can run, so a refusal stays one line.
        log.info("effective configuration:\n%s", "\n".join(effective_config_lines(broker.config)))
    except ConfigError as exc:
        print(f"kref broker: invalid configuration: {exc}", file=sys.stderr)
        return 2
    except (StartupError, TraceFileError) as exc:
        print(f"kref broker: cannot start: {exc}", file=sys.stderr)
        return 2

    def started(listeners) -> None:
        from kref.broker.gc_tuning import freeze_startup_heap

        # Serving: the start-up heap is built (kref/broker/gc_tuning.py).
        freeze_startup_heap()
        log.info("kref broker started (cluster.id %s, log.dirs %s)", broker.cluster_id, ",".join(config.log_dirs))

    status = 0
    try:
        trio.run(functools.partial(run_broker, broker, router, on_started=started))
    except* ListenError as group:
        for exc in leaf_exceptions(group):
            print(f"kref broker: {exc}", file=sys.stderr)
        status = 1
    return status
