"""A fault-injecting TCP proxy in front of every listener of every kref node.

Theory of operation
-------------------
The fault test writes each node's configuration so that every address a
peer or a client uses goes through this proxy: `advertised.listeners`
(what Metadata tells clients and followers) and `controller.quorum.voters`
(what the raft driver and the broker lifecycle dial) name proxy ports, and
the nodes still listen on their own ports. One proxy process fronts all
nodes: one proxy port per (node, listener).

A connection carries no mark of who opened it, and on loopback every
source address is 127.0.0.1. So on accept the proxy looks up which process
owns the other end of the socket: /proc/net/tcp gives the inode of the
socket whose local port is the peer's port, /proc/<pid>/fd of each node
process (the test registers pids on every start) gives its owner. A socket
owned by no node is a client (source 0).

The nemesis sets a list of blocked (source, destination, listener) rules;
listener "*" matches every listener, source 0 is clients. A blocked rule
makes the link behave like a silent partition, not like a reset:
- a new connection over it is accepted and then held: nothing is
  forwarded, so the dialer sees a connection that never answers and its
  own timeouts fire;
- an established connection over it is frozen (neither side's bytes move:
  no byte is dropped from the middle of a stream);
- when the rule is lifted, held and frozen connections are closed, as TCP
  connections that timed out during a long partition would be; the peers
  reconnect.

Control: JSON lines on stdin, one JSON answer line on stdout each:
  {"op": "listen", "node": 1, "listener": "PLAINTEXT", "target": 9092} -> {"port": P}
  {"op": "pid", "node": 1, "pid": 1234}                               -> {"ok": true}
  {"op": "block", "rules": [[1, 2, "*"], [0, 3, "PLAINTEXT"]]}      -> {"ok": true, "frozen": n}
  {"op": "stats"}                                                     -> {"connections": n, ...}
EOF on stdin stops the proxy. Bounded: at most MAX_CONNECTIONS at once
(more are closed on accept), 64 KiB per read.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

MAX_CONNECTIONS = 4096
CHUNK = 65536


def _socket_inode(local_port: int, remote_port: int) -> str | None:
    """The inode of the loopback socket (127.0.0.1:local_port -> :remote_port), if any."""
    want_local = f":{local_port:04X}"
    want_remote = f":{remote_port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    # Only a live, owned socket: a TIME_WAIT entry of an earlier connection
                    # over the same ports (loopback reuses them) has inode 0 and no owner.
                    if (fields[1].endswith(want_local) and fields[2].endswith(want_remote)
                            and fields[3] == "01" and fields[9] != "0"):
                        return fields[9]
        except OSError:
            continue
    return None


def _owner(inode: str, pids: dict[int, int]) -> int:
    target = f"socket:[{inode}]"
    for node, pid in pids.items():
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                        return node
                except OSError:
                    continue
        except OSError:
            continue
    return 0


class Link:
    """One proxied connection: source node (0 = client) -> destination node's listener."""

    def __init__(self, src: int, dst: int, listener: str, writers) -> None:
        self.src, self.dst, self.listener = src, dst, listener
        self.writers = writers
        self.flowing = asyncio.Event()
        self.blocked = False

    def close(self) -> None:
        for w in self.writers:
            w.close()
        self.flowing.set()  # wake the pumps so they see the closed streams


class Proxy:
    def __init__(self) -> None:
        self.pids: dict[int, int] = {}
        self.rules: set[tuple[int, int, str]] = set()
        self.links: set[Link] = set()
        self.servers = []
        self.accepted = 0
        self.held = 0
        self.unattributed = 0

    def is_blocked(self, src: int, dst: int, listener: str) -> bool:
        return (src, dst, listener) in self.rules or (src, dst, "*") in self.rules

    async def listen(self, node: int, listener: str, target: int) -> int:
        async def on_accept(reader, writer):
            await self._serve(node, listener, target, reader, writer)

        server = await asyncio.start_server(on_accept, "127.0.0.1", 0)
        self.servers.append(server)
        return server.sockets[0].getsockname()[1]

    async def _source(self, peer_port: int, own_port: int) -> int:
        """The node that opened this connection, 0 for a client.

        A misattributed node connection would slip past every rule that names
        its node, so a socket not (yet) listed is looked up again briefly
        before settling on 0, and counted in the stats as unattributed.
        """
        for _ in range(10):
            inode = _socket_inode(peer_port, own_port)
            if inode:
                # Found and owned by no node process: a client (the test itself).
                return _owner(inode, self.pids)
            await asyncio.sleep(0.02)
        self.unattributed += 1
        return 0

    async def _serve(self, dst, listener, target, reader, writer) -> None:
        self.accepted += 1
        if len(self.links) >= MAX_CONNECTIONS:
            writer.close()
            return
        peer_port = writer.get_extra_info("peername")[1]
        own_port = writer.get_extra_info("sockname")[1]
        src = await self._source(peer_port, own_port)
        link = Link(src, dst, listener, [writer])
        self.links.add(link)
        try:
            if self.is_blocked(src, dst, listener):
                # A silent partition: accept, forward nothing, close on heal.
                self.held += 1
                link.blocked = True
                await link.flowing.wait()
                return
            try:
                up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", target), 5)
            except (OSError, asyncio.TimeoutError):
                return
            link.writers.append(up_writer)
            if self.is_blocked(src, dst, listener):
                # Blocked while the upstream connection was being opened: held, as if
                # the partition had come first (setting `flowing` here would let it pass).
                self.held += 1
                link.blocked = True
                await link.flowing.wait()
                return
            link.flowing.set()
            await asyncio.gather(self._pump(link, reader, up_writer), self._pump(link, up_reader, writer),
                                 return_exceptions=True)
        finally:
            self.links.discard(link)
            link.close()

    async def _pump(self, link: Link, reader, writer) -> None:
        try:
            while True:
                await link.flowing.wait()
                if link.blocked:
                    return
                data = await reader.read(CHUNK)
                if not data:
                    return
                await link.flowing.wait()  # a partition that started during the read holds the bytes
                if link.blocked:
                    return
                writer.write(data)
                await writer.drain()
        finally:
            link.close()

    def block(self, rules) -> int:
        self.rules = {(int(s), int(d), str(lst)) for s, d, lst in rules}
        frozen = 0
        for link in list(self.links):
            if self.is_blocked(link.src, link.dst, link.listener):
                if link.flowing.is_set() or not link.blocked:
                    link.flowing.clear()
                    frozen += 1
            elif not link.flowing.is_set():
                # Healed: a frozen or held connection is closed, as one that timed out.
                link.blocked = True
                link.close()
        return frozen

    async def shutdown(self) -> None:
        for server in self.servers:
            server.close()
        for link in list(self.links):
            link.blocked = True
            link.close()
        await asyncio.sleep(0.1)  # let the pumps and the closed transports finish
        for task in asyncio.all_tasks() - {asyncio.current_task()}:
            task.cancel()
        await asyncio.gather(*(asyncio.all_tasks() - {asyncio.current_task()}), return_exceptions=True)

    async def control(self) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 20)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while True:
            line = await reader.readline()
            if not line:
                await self.shutdown()
                return
            try:
                cmd = json.loads(line)
                op = cmd["op"]
                if op == "listen":
                    answer = {"port": await self.listen(int(cmd["node"]), str(cmd["listener"]), int(cmd["target"]))}
                elif op == "pid":
                    self.pids[int(cmd["node"])] = int(cmd["pid"])
                    answer = {"ok": True}
                elif op == "block":
                    answer = {"ok": True, "frozen": self.block(cmd["rules"])}
                elif op == "stats":
                    by_pair: dict[str, int] = {}
                    for link in self.links:
                        key = f"{link.src}->{link.dst}/{link.listener}"
                        by_pair[key] = by_pair.get(key, 0) + 1
                    answer = {"connections": len(self.links), "accepted": self.accepted, "held": self.held,
                              "unattributed": self.unattributed, "links": by_pair}
                else:
                    answer = {"error": f"unknown op {op!r}"}
            except (KeyError, ValueError, TypeError) as exc:
                answer = {"error": str(exc)}
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()


def main() -> int:
    proxy = Proxy()
    try:
        asyncio.run(proxy.control())
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
