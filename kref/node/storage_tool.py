"""`kref storage`: format log dirs and make cluster ids, as kafka-storage.sh.

Theory of operation: `format` reads the node's configuration (the same
file `kref broker --config` reads, with the same checks), validates the
cluster id, and writes meta.properties (cluster.id, node.id, version=1,
directory.id) into every log dir and the metadata log dir. A dir already
formatted is an error unless --ignore-formatted, and even then a dir of
another cluster or node is never rewritten. `random-uuid` prints a new
cluster id. Errors are one line on stderr: exit 2 for a bad configuration
or cluster id, 1 for a dir that is already formatted.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="storage_command", required=True)
    fmt = sub.add_parser("format", help="write meta.properties into every log dir of a node")
    fmt.add_argument("--cluster-id", "-t", required=True, help="the cluster id (kref storage random-uuid)")
    fmt.add_argument("--config", "-c", required=True, metavar="server.properties")
    fmt.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    fmt.add_argument("--ignore-formatted", "-g", action="store_true", help="skip dirs that are already formatted")
    sub.add_parser("random-uuid", help="print a new cluster id")


def run(args: argparse.Namespace) -> int:
    from kref.broker.config import BrokerConfig, ConfigError
    from kref.storage import meta_properties
    from kref.controller.settings import all_log_dirs

    if args.storage_command == "random-uuid":
        print(meta_properties.random_uuid())
        return 0
    try:
        config = BrokerConfig.load(args.config, args.override)
        meta_properties.validate_cluster_id(args.cluster_id)
    except ConfigError as exc:
        print(f"kref storage: invalid configuration: {exc}", file=sys.stderr)
        return 2
    try:
        written = meta_properties.format_dirs(
            all_log_dirs(config), args.cluster_id, config.node_id, ignore_formatted=args.ignore_formatted
        )
    except meta_properties.MetaPropertiesError as exc:
        print(f"kref storage: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"kref storage: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 1
    for d in written:
        print(f"Formatting {d} with cluster.id {args.cluster_id} node.id {config.node_id}")
    return 0
