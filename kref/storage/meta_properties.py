"""meta.properties: which cluster and node a log dir belongs to.

Theory of operation
-------------------
Kafka writes `meta.properties` into every log dir (and the metadata log
dir) when `kafka-storage.sh format` runs: `version=1`, `cluster.id`,
`node.id` and, since KIP-858, a `directory.id` of its own. A node refuses
to start when a dir was never formatted, belongs to another cluster or
node, or holds a file it cannot read: starting anyway could mix the logs
of two clusters, or hand a replica's data to the wrong node. `check_dirs`
makes that decision (a pure function of the files' contents); `read`
says exactly what is wrong with a garbled file instead of guessing.

The single-node `kref broker` (no process.roles in its config) keeps
working without a format step: `ensure_formatted` writes the missing
files as a one-node combined cluster would have them, and still refuses a
garbled file or a dir of another node or cluster.

Cluster ids are Kafka Uuids: 16 random bytes in URL-safe base64 without
padding (22 characters), never starting with '-' (it would read as an
option on a command line), never the zero Uuid. Their random bytes come
from the ids port, and the date in the file's comment line from the Clock
port (`ids=`, `clock=`; the machine's by default).
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from pathlib import Path

from kref.broker.config import ConfigError, parse_properties
from kref.ports.clock import SYSTEM_CLOCK, Clock
from kref.ports.fs import FileSystem, RealFileSystem
from kref.ports.ids import SYSTEM_IDS, Ids
from kref.storage.checkpoint import write_atomically

FILE_NAME = "meta.properties"
VERSION = 1
MAX_FILE_BYTES = 64 * 1024  # a meta.properties is a few lines; anything larger is not one


class MetaPropertiesError(ConfigError):
    """A log dir is unformatted, garbled, or belongs to another cluster or node."""


@dataclass(frozen=True, slots=True)
class MetaProperties:
    cluster_id: str
    node_id: int
    directory_id: str | None = None
    version: int = VERSION

    def render(self, now_ms: int) -> str:
        lines = [
            "#",
            f"#{time.strftime('%a %b %d %H:%M:%S %Z %Y', time.localtime(now_ms / 1000))}",
            f"cluster.id={self.cluster_id}",
        ]
        if self.directory_id:
            lines.append(f"directory.id={self.directory_id}")
        lines += [f"node.id={self.node_id}", f"version={self.version}"]
        return "\n".join(lines) + "\n"


def random_uuid(ids: Ids = SYSTEM_IDS) -> str:
    """A Kafka Uuid as `kafka-storage.sh random-uuid` prints it."""
    while True:
        raw = ids.uuid().bytes
        text = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
        if not text.startswith("-") and raw != bytes(16):
            return text


def validate_cluster_id(cluster_id: str) -> str:
    try:
        raw = base64.urlsafe_b64decode(cluster_id + "==")
    except (ValueError, TypeError):
        raw = b""
    if len(cluster_id) != 22 or len(raw) != 16:
        raise MetaPropertiesError(
            f"cluster id {cluster_id!r} is not a Kafka Uuid (22 URL-safe base64 characters; "
            "use `kref storage random-uuid`)"
        )
    return cluster_id


def read(directory: str | Path, fs: FileSystem | None = None) -> MetaProperties | None:
    """The dir's meta.properties, None if it has none; MetaPropertiesError if garbled.

    Files are reached through the file-system port `fs` (the real disk when omitted)."""
    fs = fs or RealFileSystem()
    path = Path(directory) / FILE_NAME
    try:
        size = fs.file_size(str(path))
        if size > MAX_FILE_BYTES:
            raise MetaPropertiesError(f"{path} is garbled: {size} bytes is no meta.properties")
        data = fs.read_bytes(str(path))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise MetaPropertiesError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        props = parse_properties(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise MetaPropertiesError(f"{path} is garbled: not a text properties file") from None
    version = props.get("version")
    if version is None or not version.strip().isdigit():
        raise MetaPropertiesError(f"{path} is garbled: no valid version (found {version!r})")
    if int(version) != VERSION:
        raise MetaPropertiesError(f"{path} has version {version}; kref reads version {VERSION} (KRaft) only")
    cluster_id = props.get("cluster.id", "").strip()
    if not cluster_id:
        raise MetaPropertiesError(f"{path} is garbled: it has no cluster.id")
    node_id = props.get("node.id", "").strip()
    if not node_id.lstrip("-").isdigit():
        raise MetaPropertiesError(f"{path} is garbled: no valid node.id (found {props.get('node.id')!r})")
    return MetaProperties(cluster_id, int(node_id), props.get("directory.id") or None, int(version))


def check_dirs(
    found: dict[str, MetaProperties | None], node_id: int, *, require_formatted: bool
) -> str | None:
    """The cluster id the dirs agree on (None: none is formatted), or MetaPropertiesError.

    `found` maps each log dir to what `read` returned for it.
    """
    cluster_id: str | None = None
    first_dir = ""
    for directory, meta in found.items():
        if meta is None:
            if require_formatted:
                raise MetaPropertiesError(
                    f"log dir {directory} is not formatted: run `kref storage format --cluster-id ID --config FILE`"
                )
            continue
        if meta.node_id != node_id:
            raise MetaPropertiesError(
                f"log dir {directory} belongs to node.id {meta.node_id}, but this node is node.id {node_id}"
            )
        if cluster_id is not None and meta.cluster_id != cluster_id:
            raise MetaPropertiesError(
                f"log dir {directory} belongs to cluster {meta.cluster_id}, {first_dir} to cluster {cluster_id}"
            )
        cluster_id, first_dir = meta.cluster_id, directory
    return cluster_id


def write(directory: str | Path, meta: MetaProperties, fs: FileSystem | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
    """Write meta.properties atomically and durably (tmp file, fsync, rename, fsync dir)."""
    fs = fs or RealFileSystem()
    path = Path(directory) / FILE_NAME
    fs.makedirs(str(path.parent))
    write_atomically(str(path), meta.render(clock.now_ms()), fs=fs)


def format_dirs(
    dirs: list[str], cluster_id: str, node_id: int, *, ignore_formatted: bool = False,
    ids: Ids = SYSTEM_IDS, clock: Clock = SYSTEM_CLOCK,
) -> list[str]:
    """`kref storage format`: write meta.properties into every dir; the dirs formatted now."""
    validate_cluster_id(cluster_id)
    found = {d: read(d) for d in dirs}
    formatted = [d for d, meta in found.items() if meta is not None]
    if formatted and not ignore_formatted:
        raise MetaPropertiesError(
            f"log dir {formatted[0]} is already formatted (use --ignore-formatted to skip formatted dirs)"
        )
    for d, meta in found.items():
        if meta is not None and (meta.cluster_id != cluster_id or meta.node_id != node_id):
            raise MetaPropertiesError(
                f"log dir {d} is formatted for cluster {meta.cluster_id} node.id {meta.node_id}; "
                f"not reformatting it for cluster {cluster_id} node.id {node_id}"
            )
    written = []
    for d, meta in found.items():
        if meta is None:
            write(d, MetaProperties(cluster_id, node_id, random_uuid(ids)), clock=clock)
            written.append(d)
    return written


def ensure_formatted(
    dirs: list[str], node_id: int, *, require_formatted: bool, cluster_id: str | None = None,
    ids: Ids = SYSTEM_IDS, clock: Clock = SYSTEM_CLOCK,
) -> str:
    """Start-up check of every log dir; the cluster id.

    With `require_formatted` (a node configured with process.roles) every dir
    must have been formatted. Without it (the single-node broker), dirs
    lacking the file get one, with the cluster id the others have, or
    `cluster_id` (cluster.id in the config), or a new one.
    """
    found = {d: read(d) for d in dirs}
    agreed = check_dirs(found, node_id, require_formatted=require_formatted)
    if agreed is not None and cluster_id is not None and agreed != cluster_id:
        raise MetaPropertiesError(f"log dirs belong to cluster {agreed}, but cluster.id is set to {cluster_id}")
    chosen = agreed or cluster_id or random_uuid(ids)
    for d, meta in found.items():
        if meta is None:
            write(d, MetaProperties(chosen, node_id, random_uuid(ids)), clock=clock)
    return chosen
