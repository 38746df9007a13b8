"""The file-system port, with durability made explicit.

Theory of operation: a write is not durable until `fsync(path)`, and a
create, rename or delete is not durable until `fsync_dir` of its directory,
exactly the POSIX contract storage code must be written against.
RealFileSystem passes through to `os`. MemoryFileSystem keeps, per file,
the bytes as written and the bytes as last synced, and per directory the
names as changed and as last synced; `crash()` throws away everything not
yet durable (optionally keeping a torn prefix of the unsynced tail), so a
test or the simulator can check that a component survives the loss that a
power cut causes on a real disk. Bounds: MemoryFileSystem refuses to hold
more than `max_bytes` in total (ENOSPC), so a runaway writer fails loudly.
"""

from __future__ import annotations

import errno
import os
import posixpath
from dataclasses import dataclass, field
from typing import Protocol


class FileSystem(Protocol):
    def exists(self, path: str) -> bool: ...

    def read_bytes(self, path: str) -> bytes: ...

    def write_bytes(self, path: str, data: bytes) -> None: ...  # create or replace, not durable yet

    def append(self, path: str, data: bytes) -> None: ...

    def fsync(self, path: str) -> None: ...

    def fsync_dir(self, path: str) -> None: ...

    def replace(self, src: str, dst: str) -> None: ...

    def unlink(self, path: str) -> None: ...

    def listdir(self, path: str) -> list[str]: ...

    def makedirs(self, path: str) -> None: ...


class RealFileSystem:
    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def read_bytes(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def write_bytes(self, path: str, data: bytes) -> None:
        with open(path, "wb") as f:
            f.write(data)

    def append(self, path: str, data: bytes) -> None:
        with open(path, "ab") as f:
            f.write(data)

    def fsync(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def fsync_dir(self, path: str) -> None:
        self.fsync(path)

    def replace(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)


@dataclass
class _File:
    data: bytearray = field(default_factory=bytearray)
    synced: bytes = b""


class MemoryFileSystem:
    """An in-memory disk that loses what was not made durable when it `crash()`es."""

    def __init__(self, max_bytes: int = 1 << 30) -> None:
        self.max_bytes = max_bytes
        self._files: dict[str, _File] = {}  # the live namespace
        # What survives a crash: path -> synced bytes, for names made durable.
        self._durable_names: dict[str, _File] = {}
        self._dirs: set[str] = {"/"}

    # ------------------------------------------------------------ reads

    def exists(self, path: str) -> bool:
        path = _norm(path)
        return path in self._files or path in self._dirs

    def read_bytes(self, path: str) -> bytes:
        return bytes(self._file(path).data)

    def listdir(self, path: str) -> list[str]:
        path = _norm(path)
        if path not in self._dirs:
            raise FileNotFoundError(errno.ENOENT, "no such directory", path)
        names = {posixpath.basename(p) for p in self._files if posixpath.dirname(p) == path}
        names |= {posixpath.basename(d) for d in self._dirs if d != path and posixpath.dirname(d) == path}
        return sorted(names)

    # ------------------------------------------------------------ writes

    def makedirs(self, path: str) -> None:
        path = _norm(path)
        while path not in self._dirs:
            self._dirs.add(path)
            path = posixpath.dirname(path)

    def write_bytes(self, path: str, data: bytes) -> None:
        path = self._creatable(path)
        self._charge(len(data) - len(self._files[path].data) if path in self._files else len(data))
        f = self._files.get(path)
        if f is None:
            f = self._files[path] = _File()
        f.data = bytearray(data)

    def append(self, path: str, data: bytes) -> None:
        path = self._creatable(path)
        self._charge(len(data))
        self._files.setdefault(path, _File()).data += data

    def fsync(self, path: str) -> None:
        f = self._file(path)
        f.synced = bytes(f.data)

    def fsync_dir(self, path: str) -> None:
        path = _norm(path)
        for p in [p for p in self._durable_names if posixpath.dirname(p) == path]:
            if self._files.get(p) is not self._durable_names[p]:
                del self._durable_names[p]
        for p, f in self._files.items():
            if posixpath.dirname(p) == path:
                self._durable_names[p] = f

    def replace(self, src: str, dst: str) -> None:
        src, dst = _norm(src), self._creatable(dst)
        self._files[dst] = self._file(src)
        del self._files[src]

    def unlink(self, path: str) -> None:
        self._file(path)
        del self._files[_norm(path)]

    # ------------------------------------------------------------ faults

    def crash(self, *, keep_torn_bytes: int = 0) -> None:
        """A power cut: every file goes back to its synced bytes and every
        name to its last durable directory entry. `keep_torn_bytes` keeps
        that many bytes of each file's unsynced tail (a torn write)."""
        survivors: dict[str, _File] = {}
        for path, f in self._durable_names.items():
            tail = bytes(f.data[len(f.synced): len(f.synced) + keep_torn_bytes]) if f.data[: len(f.synced)] == f.synced else b""
            survivors[path] = _File(bytearray(f.synced + tail), f.synced)
        self._files = survivors
        self._durable_names = dict(survivors)

    # ------------------------------------------------------------ internals

    def _file(self, path: str) -> _File:
        f = self._files.get(_norm(path))
        if f is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", path)
        return f

    def _creatable(self, path: str) -> str:
        path = _norm(path)
        if posixpath.dirname(path) not in self._dirs:
            raise FileNotFoundError(errno.ENOENT, "no such directory", posixpath.dirname(path))
        return path

    def _charge(self, extra: int) -> None:
        if sum(len(f.data) for f in self._files.values()) + extra > self.max_bytes:
            raise OSError(errno.ENOSPC, "in-memory disk full")


def _norm(path: str) -> str:
    return posixpath.normpath("/" + str(path).lstrip("/")) if not str(path).startswith("/") else posixpath.normpath(str(path))
