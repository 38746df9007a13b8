"""Reading broker configuration: Java .properties text and typed values.

Theory of operation: every broker property's raw string goes through one of
the parsers here, which range-checks it and raises ConfigError naming the
property, so a typo never silently falls back to a default. The parsers know
nothing of which properties exist; the table in config.py does. Kafka's
ConfigDef types are attached to each parser (`kafka_type`) so DescribeConfigs
can report them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

class ConfigError(ValueError):
    """A broker property is unknown or its value is invalid."""


class StartupError(Exception):
    """The broker cannot start on what it found (a corrupt file, an unusable path): one line, exit 2."""


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


# --- value parsers -------------------------------------------------------------


# DescribeConfigs v3+ config_type ids (Kafka's ConfigDef.Type).
CONFIG_TYPE_IDS = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7, "PASSWORD": 9}


def _typed(kafka_type: str, parse: Callable[[str, str], object]) -> Callable[[str, str], object]:
    parse.kafka_type = kafka_type  # type: ignore[attr-defined]
    return parse


def _int(lo: int | None = None, hi: int | None = None) -> Callable[[str, str], int]:
    def parse(name: str, raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ConfigError(f"{name}: expected an integer, got {raw!r}") from None
        if lo is not None and value < lo:
            raise ConfigError(f"{name}: {value} is below the minimum {lo}")
        if hi is not None and value > hi:
            raise ConfigError(f"{name}: {value} is above the maximum {hi}")
        return value

    # Kafka's LONG settings are the ones whose range needs 64 bits.
    return _typed("LONG" if hi is not None and hi > 2**31 - 1 else "INT", parse)  # type: ignore[return-value]


def _bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"{name}: expected true or false, got {raw!r}")
    return value == "true"


def _double(lo: float | None = None, hi: float | None = None) -> Callable[[str, str], float]:
    def parse(name: str, raw: str) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            raise ConfigError(f"{name}: expected a number, got {raw!r}") from None
        if value != value or (lo is not None and value < lo) or (hi is not None and value > hi):
            raise ConfigError(f"{name}: {raw.strip()} is outside [{lo}, {hi}]")
        return value

    return _typed("DOUBLE", parse)  # type: ignore[return-value]


def _choice(*choices: str) -> Callable[[str, str], str]:
    def parse(name: str, raw: str) -> str:
        value = raw.strip()
        if value not in choices:
            raise ConfigError(f"{name}: {raw!r} is not one of {', '.join(choices)}")
        return value

    return _typed("STRING", parse)  # type: ignore[return-value]


def _cleanup_policy(name: str, raw: str) -> str:
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise ConfigError(f"{name}: {raw!r} must be a list of delete and/or compact")
    return ",".join(parts)


def _string(name: str, raw: str) -> str:
    return raw.strip()


def _dir_list(name: str, raw: str) -> tuple[str, ...]:
    dirs = tuple(d.strip() for d in raw.split(",") if d.strip())
    if not dirs:
        raise ConfigError(f"{name}: at least one directory is required")
    return dirs


_typed("BOOLEAN", _bool)
_typed("LIST", _cleanup_policy)
_typed("STRING", _string)
_typed("STRING", _dir_list)  # Kafka's log.dirs is a comma-separated STRING

_LISTENER = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)://(?P<host>\[[^\]]*\]|[^:/]*):(?P<port>\d+)$")


def _listener_list(name: str, raw: str) -> tuple[Listener, ...]:
    out = []
    for item in (i.strip() for i in raw.split(",")):
        if not item:
            continue
        m = _LISTENER.match(item)
        if not m:
            raise ConfigError(f"{name}: {item!r} is not NAME://host:port")
        port = int(m["port"])
        if port > 65535:
            raise ConfigError(f"{name}: port {port} out of range in {item!r}")
        out.append(Listener(m["name"].upper(), m["host"].strip("[]"), port))
    names = [listener.name for listener in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"{name}: listener names must be unique in {raw!r}")
    return tuple(out)


_typed("STRING", _listener_list)  # Kafka's listeners are a comma-separated STRING
_I32 = 2**31 - 1
_I64 = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Voter:
    """One entry of controller.quorum.voters: `id@host:port`."""

    node_id: int
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.node_id}@{self.host}:{self.port}"


def _voter_list(name: str, raw: str) -> tuple[Voter, ...]:
    voters = []
    for item in (x.strip() for x in raw.split(",")):
        if not item:
            continue
        m = re.fullmatch(r"(\d+)@(\[[^\]]*\]|[^:@]*):(\d+)", item)
        if not m or not 0 < int(m.group(3)) < 65536:
            raise ConfigError(f"{name}: {item!r} is not id@host:port")
        voters.append(Voter(int(m.group(1)), m.group(2).strip("[]"), int(m.group(3))))
    ids = [v.node_id for v in voters]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{name}: node id {max(ids, key=ids.count)} appears more than once")
    return tuple(voters)


def _roles(name: str, raw: str) -> tuple[str, ...]:
    roles = [r.strip() for r in raw.split(",") if r.strip()]
    if not roles:
        raise ConfigError(f"{name}: must name broker, controller or both")
    for r in roles:
        if r not in ("broker", "controller"):
            raise ConfigError(f"{name}: unknown role {r!r} (broker, controller)")
    if len(set(roles)) != len(roles):
        raise ConfigError(f"{name}: {raw.strip()!r} names a role twice")
    return tuple(sorted(roles))


def _name_list(name: str, raw: str) -> tuple[str, ...]:
    return tuple(n.strip().upper() for n in raw.split(",") if n.strip())


def advertisable(listener: Listener) -> Listener:
    """A bound listener as clients can reach it: wildcard hosts become 127.0.0.1
    (kref's default audience is this machine; set advertised.listeners otherwise)."""
    if listener.host in ("", "0.0.0.0", "::"):
        return Listener(listener.name, "127.0.0.1", listener.port)
    return listener


_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _require_plaintext(listeners: Iterable[Listener], props: Mapping[str, str]) -> None:
    """kref speaks PLAINTEXT only: a listener whose security protocol (Kafka's
    listener.security.protocol.map, by default the listener's own name) is SSL
    or SASL would accept TLS/SASL clients and answer them in plaintext, which
    they can only report as a broken connection. Refuse it at start instead."""
    mapping = {}
    for item in props.get("listener.security.protocol.map", "").split(","):
        name, sep, protocol = item.partition(":")
        if sep:
            mapping[name.strip().upper()] = protocol.strip().upper()
    for lst in listeners:
        protocol = mapping.get(lst.name, lst.name if lst.name in _SECURITY_PROTOCOLS else None)
        if protocol is None:
            raise ConfigError(f"listeners: no security protocol for listener {lst.name} "
                              f"(set listener.security.protocol.map, e.g. {lst.name}:PLAINTEXT)")
        if protocol != "PLAINTEXT":
            raise ConfigError(f"listeners: {lst} uses security protocol {protocol}; kref serves PLAINTEXT only")


def parse_properties(text: str) -> dict[str, str]:
    """A Java .properties reader: comments (# !), `=`/`:`/space separators,
    backslash line continuations and escapes."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        while _ends_with_odd_backslashes(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip()
            i += 1
        key_chars: list[str] = []
        j = 0
        while j < len(line):
            ch = line[j]
            if ch == "\\" and j + 1 < len(line):
                key_chars.append(_unescape(line[j + 1]))
                j += 2
                continue
            if ch in "=: \t":
                break
            key_chars.append(ch)
            j += 1
        rest = line[j:].lstrip(" \t")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t")
        out["".join(key_chars)] = _unescape_value(rest)
    return out


def _ends_with_odd_backslashes(line: str) -> bool:
    n = len(line) - len(line.rstrip("\\"))
    return n % 2 == 1


def _unescape(ch: str) -> str:
    return {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(ch, ch)


def _unescape_value(value: str) -> str:
    out = []
    j = 0
    while j < len(value):
        if value[j] == "\\" and j + 1 < len(value):
            out.append(_unescape(value[j + 1]))
            j += 2
        else:
            out.append(value[j])
            j += 1
    return "".join(out).rstrip()
