"""The `kref` command line.

Each subcommand lives in its own module and registers itself here; `kref
--help` lists exactly the registered ones (the description names none, so
it can never promise a command that does not exist).
"""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kref", description="kref: a formally specified reference implementation of Apache Kafka's internals."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("version", help="print the kref version")
    from kref.broker.main import add_arguments as add_broker_arguments

    add_broker_arguments(sub.add_parser("broker", help="run a kref broker (Kafka protocol)"))
    from kref.node.storage_tool import add_arguments as add_storage_arguments

    add_storage_arguments(sub.add_parser("storage", help="format log dirs, make cluster ids (kafka-storage.sh)"))
    from kref.node.local_cluster import add_arguments as add_cluster_arguments

    add_cluster_arguments(sub.add_parser("cluster", help="run a local KRaft cluster (3 combined nodes by default)"))
    from kref.sim.cli import add_arguments as add_sim_arguments

    add_sim_arguments(sub.add_parser("sim", help="deterministic cluster simulation: one seed or a campaign"))
    from trace_check.cli import add_arguments as add_trace_arguments

    add_trace_arguments(sub.add_parser("trace", help="validate trace files against the TLA+ specs with TLC"))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "version":
        from kref import __version__

        print(__version__)
        return 0
    if args.command == "broker":
        from kref.broker.main import run as run_broker

        return run_broker(args)
    if args.command == "cluster":
        from kref.node.local_cluster import run as run_cluster

        return run_cluster(args)
    if args.command == "storage":
        from kref.node.storage_tool import run as run_storage

        return run_storage(args)
    if args.command == "trace":
        from trace_check.cli import run as run_trace

        return run_trace(args)
    if args.command == "sim":
        from kref.sim.cli import run as run_sim

        return run_sim(args)
    parser.error(f"unknown command {args.command!r}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
