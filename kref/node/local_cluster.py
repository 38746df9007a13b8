"""`kref cluster`: a local KRaft cluster in one command, and the helpers tests share.

Theory of operation
-------------------
`plan` lays out N nodes in a base dir: node i (1-based) has the controller
role if i <= --controllers and the broker role if i <= --brokers, so the
default (3, 3) is three combined nodes. Each gets a free client port and a
free CONTROLLER port on 127.0.0.1 (bound once to learn a free number, then
released: a race with another program is possible and shows as a
one-line "cannot listen" from that node, which then exits), or, with `--port P`, fixed ones
(node i: client port P+i-1, CONTROLLER port P+100+i-1; `make run` uses
9092, so clients find it where a Kafka quick start has it), its own log dir, and a
server.properties written with Kafka's property names. `format` runs what
`kref storage format` does for every node with one cluster id. `start`
runs `kref broker --config` for a node with stdout and stderr in
node-<id>.log. `run` does all of it, prints the bootstrap servers, and on
Ctrl-C (SIGINT) or SIGTERM stops every node with SIGTERM and waits.

Readiness is what a client sees, not what a log line says: `brokers_listed`
asks every broker node for Metadata over the wire and is true once each
answer lists every broker of the layout. A node logs "unfenced" when the
controller unfenced *its own* registration; the other brokers' unfencing
reaches its metadata cache only when it has replicated those records, so a
client that trusted the log line could still be told of one broker (Kafka
propagates broker registrations the same eventual way). `run` prints
"cluster ready" once, and tests wait on the same probe.

A node has started when it says so: `wait_listening` returns once this
start of the node (its log past the size it had before the start) has
logged each of its own listeners bound, and raises NodeStartError at once
when it logs "cannot listen" or exits. An open port is no proof: the ports
are chosen before the node binds them, so a node of another cluster beside
this one (another test, another xdist worker) may hold the port, and a
connection would reach that node. Tests (tests/clusterkit.py) and
benchmarks wait on it before they talk to a node.

The processes are started only by this module and stopped by their pids.
Waits read the Clock port (`clock=`, the system clock by default) and the
port picks draw from a generator seeded by the ids port, so nothing here
reads time or entropy of its own.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from kref.ports.clock import SYSTEM_CLOCK
from kref.ports.ids import SYSTEM_IDS

__all__ = ["NodeSpec", "NodeStartError", "plan", "format_nodes", "start_node", "log_size", "wait_listening", "run",
           "add_arguments", "brokers_listed", "wait_ready"]

MAX_NODES = 16


@dataclass
class NodeSpec:
    node_id: int
    roles: tuple[str, ...]
    client_port: int | None
    controller_port: int | None
    dir: Path
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def config_file(self) -> Path:
        return self.dir / "server.properties"

    @property
    def log_file(self) -> Path:
        return self.dir / f"node-{self.node_id}.log"

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"


_PORT_RANDOM = random.Random(SYSTEM_IDS.seed())  # never the tests' seeded generator


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now, chosen BELOW the kernel's ephemeral range.

    A port from bind(0) lies in the ephemeral range, so between this check and
    the node's own bind any outgoing connection on the machine (another test's
    client, a replica fetcher) may take it as its source port, and the node
    then dies with "address in use". Ports below the range are never handed out
    as source ports; only another listener can race us for one, and a random
    pick among thousands makes that rare."""
    low = _ephemeral_low()
    if low > 12000:
        for _ in range(200):
            candidate = _PORT_RANDOM.randrange(10000, low)
            with socket.socket() as s:
                try:
                    s.bind((host, candidate))
                except OSError:
                    continue
                return candidate
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def plan(
    base_dir: str | Path,
    controllers: int = 3,
    brokers: int = 3,
    *,
    host: str = "127.0.0.1",
    overrides: dict[str, str] | None = None,
    port: int = 0,
) -> list[NodeSpec]:
    if controllers < 1:
        raise ValueError("--controllers must be at least 1")
    if brokers < 0 or max(controllers, brokers) > MAX_NODES:
        raise ValueError(f"--brokers must be 0..{MAX_NODES} and --controllers at most {MAX_NODES}")
    if port and not 1 <= port <= 65535 - 100 - MAX_NODES:
        raise ValueError(f"--port must be 1..{65535 - 100 - MAX_NODES}")

    taken: set[int] = set()

    def port_for(node_id: int, offset: int) -> int:
        if port:
            return port + offset + node_id - 1
        # Each free port is released before the next is asked for, so the OS
        # may hand the same one out twice: two listeners of one cluster on one
        # port (a node then dies on bind). Ask again until it is new.
        for _ in range(100):
            candidate = free_port(host)
            if candidate not in taken:
                taken.add(candidate)
                return candidate
        raise RuntimeError("no distinct free ports")

    base = Path(base_dir)
    specs = []
    for node_id in range(1, max(controllers, brokers) + 1):
        roles = tuple(r for r, n in (("broker", brokers), ("controller", controllers)) if node_id <= n)
        specs.append(
            NodeSpec(
                node_id,
                roles,
                port_for(node_id, 0) if "broker" in roles else None,
                port_for(node_id, 100) if "controller" in roles else None,
                base / f"node-{node_id}",
            )
        )
    voters = ",".join(f"{s.node_id}@{host}:{s.controller_port}" for s in specs if s.controller_port)
    for s in specs:
        listeners = []
        if s.client_port:
            listeners.append(f"PLAINTEXT://{host}:{s.client_port}")
        if s.controller_port:
            listeners.append(f"CONTROLLER://{host}:{s.controller_port}")
        s.properties = {
            "process.roles": ",".join(s.roles),
            "node.id": str(s.node_id),
            "controller.quorum.voters": voters,
            "listeners": ",".join(listeners),
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(s.data_dir),
        }
        if s.client_port:
            s.properties["inter.broker.listener.name"] = "PLAINTEXT"
            # Kafka's default of 3 where there are 3 brokers: groups and their
            # committed offsets survive the loss of the coordinator's broker.
            s.properties["offsets.topic.replication.factor"] = str(min(3, brokers))
        s.properties.update(overrides or {})
        s.dir.mkdir(parents=True, exist_ok=True)
        s.config_file.write_text("".join(f"{k}={v}\n" for k, v in s.properties.items()))
    return specs


def format_nodes(specs: list[NodeSpec], cluster_id: str) -> None:
    from kref.broker.config import BrokerConfig
    from kref.storage import meta_properties
    from kref.controller.settings import all_log_dirs

    for s in specs:
        config = BrokerConfig.load(s.config_file)
        meta_properties.format_dirs(all_log_dirs(config), cluster_id, s.node_id, ignore_formatted=True)


def start_node(spec: NodeSpec, *extra: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    log_file = open(spec.log_file, "ab")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "kref.cli", "broker", "--config", str(spec.config_file), *extra],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
        )
    finally:
        log_file.close()


class NodeStartError(RuntimeError):
    """A node did not start: it could not listen, exited, or logged no listener in time."""


def log_size(spec: NodeSpec) -> int:
    """The size of the node's log now: pass it to wait_listening for the start about to be made."""
    try:
        return spec.log_file.stat().st_size
    except OSError:
        return 0


def listening_lines(spec: NodeSpec) -> list[str]:
    """The lines a node logs once each of its listeners is bound (kref/node/node.py, kref/broker/server.py)."""
    from kref.broker.config import BrokerConfig

    config = BrokerConfig.load(spec.config_file)
    lines = []
    if "controller" in config.process_roles:
        lines += [f"node {spec.node_id}: controller listener {listener}" for listener in config.controller_listeners]
    if "broker" in config.process_roles:
        lines += [f"kref broker {spec.node_id} listening on {listener}" for listener in config.listeners]
    return lines


def wait_listening(spec: NodeSpec, process: subprocess.Popen, since: int, timeout_s: float = 120.0,
                   clock=SYSTEM_CLOCK) -> None:
    """Return once the start of `spec` whose log begins at byte `since` has logged
    every listener of its own bound; NodeStartError at once if it logs "cannot
    listen" or exits first, or after `timeout_s`."""
    expected = listening_lines(spec)
    deadline_ms = clock.monotonic_ms() + int(timeout_s * 1000)
    while True:
        try:
            with open(spec.log_file, "rb") as f:
                f.seek(since)
                text = f.read().decode(errors="replace")
        except OSError:
            text = ""
        refused = next((line for line in text.splitlines() if "cannot listen" in line), None)
        if refused is not None:
            raise NodeStartError(f"node {spec.node_id} did not start: {refused.strip()} (log {spec.log_file})")
        if all(line in text for line in expected):
            return
        if process.poll() is not None:
            tail = "\n".join(text.splitlines()[-20:])
            raise NodeStartError(f"node {spec.node_id} exited with {process.returncode} before listening "
                                 f"(log {spec.log_file}):\n{tail}")
        if clock.monotonic_ms() >= deadline_ms:
            missing = [line for line in expected if line not in text]
            raise NodeStartError(f"node {spec.node_id} logged no {missing} within {timeout_s:g} s (log {spec.log_file})")
        clock.sleep_ms(50)


def bootstrap_servers(specs: list[NodeSpec], host: str = "127.0.0.1") -> str:
    return ",".join(f"{host}:{s.client_port}" for s in specs if s.client_port)


def _listed_by(port: int, timeout: float) -> set[int]:
    """The broker ids one node's Metadata answer lists (empty if it cannot answer yet)."""
    from kref.protocol.client import WireClient
    from kref.protocol.codec import request_class

    try:
        with WireClient("127.0.0.1", port, timeout=timeout) as client:
            response = client.request(request_class(3, 12)(
                topics=[], allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    except (OSError, ValueError, EOFError):
        return set()
    return {b.node_id for b in response.brokers}


def brokers_listed(specs: list[NodeSpec], timeout: float = 2.0) -> bool:
    """True when every broker node's Metadata lists every broker node of the layout."""
    brokers = {s.node_id for s in specs if s.client_port}
    return all(_listed_by(s.client_port, timeout) >= brokers for s in specs if s.client_port)


def wait_ready(specs: list[NodeSpec], timeout_s: float = 60.0, alive=lambda: True, clock=SYSTEM_CLOCK) -> bool:
    """Poll `brokers_listed` until true (True), the deadline passes on `clock`
    or `alive()` turns false (False)."""
    deadline_ms = clock.monotonic_ms() + int(timeout_s * 1000)
    while clock.monotonic_ms() < deadline_ms and alive():
        if brokers_listed(specs):
            return True
        clock.sleep_ms(100)
    return False


def add_arguments(parser) -> None:
    parser.add_argument("--controllers", type=int, default=3, help="nodes with the controller role (default 3)")
    parser.add_argument("--brokers", type=int, default=3, help="nodes with the broker role (default 3)")
    parser.add_argument("--dir", default="./kref-cluster", help="base dir for the nodes' configs, data and logs")
    parser.add_argument("--port", type=int, default=0,
                        help="first client port (node i: port+i-1, its CONTROLLER port port+100+i-1); default: free ports")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a property for every node (repeatable)")


def run(args, clock=SYSTEM_CLOCK) -> int:
    from kref.storage import meta_properties

    overrides = {}
    for item in args.override:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"kref cluster: --override expects key=value, got {item!r}", file=sys.stderr)
            return 2
        overrides[key.strip()] = value
    try:
        specs = plan(args.dir, args.controllers, args.brokers, overrides=overrides, port=args.port)
    except ValueError as exc:
        print(f"kref cluster: {exc}", file=sys.stderr)
        return 2
    existing = {meta_properties.read(s.data_dir) for s in specs} - {None}
    cluster_id = next(iter(existing)).cluster_id if existing else meta_properties.random_uuid()
    try:
        format_nodes(specs, cluster_id)
    except Exception as exc:  # a config or format error: one line
        print(f"kref cluster: {exc}", file=sys.stderr)
        return 2
    processes = {s.node_id: start_node(s) for s in specs}
    print(f"kref cluster {cluster_id}: {len(specs)} nodes in {Path(args.dir).resolve()}")
    for s in specs:
        print(f"  node {s.node_id} ({','.join(s.roles)}): log {s.log_file}")
    if bootstrap_servers(specs):
        print(f"bootstrap servers: {bootstrap_servers(specs)}", flush=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    status = 0
    ready = not bootstrap_servers(specs)  # a controllers-only layout has nobody to ask
    ready_deadline_ms = clock.monotonic_ms() + 120_000
    try:
        while not stop:
            if not ready and brokers_listed(specs, timeout=0.5):
                ready = True
                print(f"cluster ready: every broker lists all {sum(1 for s in specs if s.client_port)} brokers",
                      flush=True)
            elif not ready and clock.monotonic_ms() > ready_deadline_ms:
                ready = True  # say it once, keep running: the logs tell why
                print("kref cluster: brokers still not all listed after 120 s; see the node logs", file=sys.stderr)
            for node_id, p in processes.items():
                if p.poll() is not None:
                    print(f"kref cluster: node {node_id} exited with {p.returncode}; see its log", file=sys.stderr)
                    stop.append(1)
                    status = 1
            clock.sleep_ms(200)
    except KeyboardInterrupt:
        pass
    for p in processes.values():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline_ms = clock.monotonic_ms() + 15_000
    for p in processes.values():
        try:
            p.wait(timeout=max(0.1, (deadline_ms - clock.monotonic_ms()) / 1000))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    print("kref cluster stopped")
    return status
