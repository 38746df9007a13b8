"""Real kref nodes behind the fault proxy, for the fault tests and the soak.

Theory of operation
-------------------
`FaultCluster` lays out combined controller+broker nodes as `kref cluster`
does (kref/node/local_cluster.plan), starts one proxy process
(tests/faults/proxy.py) with a port per node listener, and rewrites each
node's server.properties so that peers and clients only ever dial proxy
ports: `advertised.listeners` names the proxy's PLAINTEXT port and
`controller.quorum.voters` the proxy's CONTROLLER ports. The nodes listen
on their own ports. Every (re)started node's pid is registered with the
proxy, which is how the proxy tells a connection from node 2 from one from
node 3 or from a client.

The fault primitives are kill -9 (and restart from the same dirs),
SIGSTOP/SIGCONT, and `block(rules)` that sets the proxy's partition rules
(source node, destination node, listener; source 0 = clients). Every wait
is bounded; only processes started here are signalled, by pid.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from kref.node import local_cluster
from kref.storage import meta_properties

class ProxyProcess:
    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [str(Path(__file__).resolve().parents[2]),
                                                                          os.environ.get("PYTHONPATH", "")] if p)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.faults.proxy"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, env=env,
        )

    def call(self, **cmd) -> dict:
        assert self.process.stdin and self.process.stdout
        self.process.stdin.write(json.dumps(cmd) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("the fault proxy exited")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"fault proxy: {answer['error']}")
        return answer

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.close()
                self.process.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()


class FaultCluster:
    """Combined nodes behind the proxy. Use as a context manager."""

    def __init__(self, base_dir: Path, nodes: int = 3, overrides: dict[str, str] | None = None,
                 trace: bool = False) -> None:
        self.base_dir = Path(base_dir)
        self.nodes = nodes
        self.overrides = dict(overrides or {})
        self.trace = trace
        self.processes: dict[int, subprocess.Popen] = {}
        self.stopped: set[int] = set()
        self.killed: set[int] = set()  # nodes this harness killed and has not restarted
        self.crashes: list[str] = []  # nodes that exited without being told to
        self.proxy: ProxyProcess | None = None
        self.specs = []
        self.proxy_ports: dict[tuple[int, str], int] = {}

    def __enter__(self) -> "FaultCluster":
        try:
            self.start_all()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start_all(self) -> None:
        self.specs = local_cluster.plan(self.base_dir, controllers=self.nodes, brokers=self.nodes,
                                        overrides=self.overrides)
        self.proxy = ProxyProcess()
        for s in self.specs:
            self.proxy_ports[(s.node_id, "PLAINTEXT")] = self.proxy.call(
                op="listen", node=s.node_id, listener="PLAINTEXT", target=s.client_port)["port"]
            self.proxy_ports[(s.node_id, "CONTROLLER")] = self.proxy.call(
                op="listen", node=s.node_id, listener="CONTROLLER", target=s.controller_port)["port"]
        voters = ",".join(f"{s.node_id}@127.0.0.1:{self.proxy_ports[(s.node_id, 'CONTROLLER')]}" for s in self.specs)
        for s in self.specs:
            s.properties["controller.quorum.voters"] = voters
            s.properties["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{self.proxy_ports[(s.node_id, 'PLAINTEXT')]}"
            s.config_file.write_text("".join(f"{k}={v}\n" for k, v in s.properties.items()))
        local_cluster.format_nodes(self.specs, meta_properties.random_uuid())
        for s in self.specs:
            self.start(s.node_id)

    @property
    def by_id(self):
        return {s.node_id: s for s in self.specs}

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.proxy_ports[(s.node_id, 'PLAINTEXT')]}" for s in self.specs)

    def direct_bootstrap(self) -> str:
        return local_cluster.bootstrap_servers(self.specs)

    # -- fault primitives ---------------------------------------------------
    def start(self, node: int) -> None:
        spec = self.by_id[node]
        extra = ("--trace-file", str(spec.dir / "trace.ndjson")) if self.trace else ()
        self.processes[node] = local_cluster.start_node(spec, *extra)
        self.stopped.discard(node)
        self.killed.discard(node)
        self.proxy.call(op="pid", node=node, pid=self.processes[node].pid)

    def alive(self, node: int) -> bool:
        p = self.processes.get(node)
        return p is not None and p.poll() is None

    def kill(self, node: int) -> None:
        p = self.processes[node]
        self.killed.add(node)
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=10)

    def pause(self, node: int) -> None:
        if self.alive(node):
            self.processes[node].send_signal(signal.SIGSTOP)
            self.stopped.add(node)

    def resume(self, node: int) -> None:
        if self.alive(node):
            self.processes[node].send_signal(signal.SIGCONT)
        self.stopped.discard(node)

    def block(self, rules) -> None:
        self.proxy.call(op="block", rules=[list(r) for r in rules])

    def heal(self) -> None:
        self.block([])

    def stats(self) -> dict:
        return self.proxy.call(op="stats")

    def note_crashes(self) -> list[str]:
        """Nodes that exited on their own since the last look (a crash is a finding)."""
        found = []
        for node, p in self.processes.items():
            if p.poll() is not None and node not in self.killed:
                found.append(f"node {node} exited by itself with status {p.returncode} (see node-{node}.log)")
                self.killed.add(node)  # reported once; restore() restarts it
        self.crashes += found
        return found

    def restore(self) -> None:
        """Undo every fault: heal the network, resume paused nodes, restart dead ones."""
        self.note_crashes()
        self.heal()
        for node in list(self.stopped):
            self.resume(node)
        for s in self.specs:
            if not self.alive(s.node_id):
                self.start(s.node_id)

    def close(self) -> None:
        for node, p in self.processes.items():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGTERM)
        for p in self.processes.values():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.proxy is not None:
            self.proxy.close()

    def log_tail(self, node: int, lines: int = 20) -> str:
        try:
            return "\n".join(self.by_id[node].log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""
