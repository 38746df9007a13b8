"""The file-system port, with durability made explicit.

Theory of operation: a write is not durable until `fsync`, and a create,
rename or delete is not durable until `fsync_dir` of its directory, exactly
the POSIX contract storage code must be written against. Storage reaches
files only through this port, in two shapes:

- whole-file helpers (`read_bytes`, `write_bytes`, `append`, `replace`,
  `listdir`, ...) for the small files (checkpoints, snapshots, markers);
- file handles (`open` -> FileHandle: `pread`, `readinto`, `pwrite`,
  `size`, `truncate`, `fsync`, `close`) for segments and indexes, which
  write at positions and must not reopen a file per call.

RealFileSystem passes through to `os`; its handles wrap one descriptor and
bind the hot calls (pread/pwrite/ftruncate/fsync) to it once, so the port
costs the log no Python frame per read or write. MemoryFileSystem keeps,
per file, the bytes as written and the bytes as last synced, and per
directory the names as changed and as last synced; `crash()` throws away
everything not yet durable (optionally keeping a torn prefix of each
unsynced tail, a fixed length or a seeded random one), and every handle
opened before the crash is dead afterwards (EIO), so a test or the
simulator can check that a component survives the loss a power cut causes
on a real disk. `cut_power_after(n)` makes the n-th mutating operation from
now (a write, truncate, fsync, rename, unlink, ...) raise PowerCut instead
of happening, and every operation after it too, until `crash()`: a test
counts a workload's operations once, then cuts the power at each point (or
a seeded sample of them) and checks recovery. Directories themselves (makedirs, rmtree, a directory's
rename) are durable at once in the in-memory disk: storage only renames or
removes whole partition directories on deletion, where either outcome of a
crash is recovered by the log manager. Bounds: MemoryFileSystem refuses to
hold more than `max_bytes` in total (ENOSPC), so a runaway writer fails
loudly.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os
import posixpath
import random
import shutil
from dataclasses import dataclass, field
from typing import Callable, Protocol


class FileHandle(Protocol):
    """An open file, read-write, addressed by position (no file pointer)."""

    def pread(self, size: int, position: int) -> bytes: ...

    def readinto(self, buffer: memoryview, position: int) -> int: ...

    def pwrite(self, data: bytes | bytearray | memoryview, position: int) -> int: ...

    def size(self) -> int: ...

    def truncate(self, size: int) -> None: ...  # shrink, or extend with zeros

    def fsync(self) -> None: ...

    def close(self) -> None: ...


class FileSystem(Protocol):
    # -- whole files and names
    def exists(self, path: str) -> bool: ...

    def is_file(self, path: str) -> bool: ...

    def is_dir(self, path: str) -> bool: ...

    def file_size(self, path: str) -> int: ...

    def mtime_ms(self, path: str) -> int: ...

    def read_bytes(self, path: str) -> bytes: ...

    def write_bytes(self, path: str, data: bytes) -> None: ...  # create or replace, not durable yet

    def append(self, path: str, data: bytes) -> None: ...

    def fsync(self, path: str) -> None: ...

    def fsync_dir(self, path: str) -> None: ...

    def replace(self, src: str, dst: str) -> None: ...  # rename, replacing dst (files or directories)

    def unlink(self, path: str) -> None: ...

    def listdir(self, path: str) -> list[str]: ...

    def makedirs(self, path: str) -> None: ...

    def rmtree(self, path: str) -> None: ...  # a missing tree is no error

    # -- handles
    def open(self, path: str, *, create: bool = False, truncate: bool = False) -> FileHandle: ...

    def lock(self, path: str) -> FileHandle: ...  # exclusive, non-blocking: BlockingIOError if held


# ---------------------------------------------------------------- real


class RealFile:
    """One descriptor; the hot calls are os functions bound to it (no Python frame)."""

    __slots__ = ("fd", "pread", "pwrite", "truncate", "_fsync", "_preadv")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pread: Callable[[int, int], bytes] = functools.partial(os.pread, fd)
        self.pwrite: Callable[[bytes | bytearray | memoryview, int], int] = functools.partial(os.pwrite, fd)
        self.truncate: Callable[[int], None] = functools.partial(os.ftruncate, fd)
        self._fsync = functools.partial(os.fsync, fd)
        self._preadv = functools.partial(os.preadv, fd)

    def readinto(self, buffer: memoryview, position: int) -> int:
        return self._preadv((buffer,), position)

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def fsync(self) -> None:
        self._fsync()

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)


class RealFileSystem:
    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def is_file(self, path: str) -> bool:
        return os.path.isfile(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def file_size(self, path: str) -> int:
        return os.path.getsize(path)

    def mtime_ms(self, path: str) -> int:
        return int(os.stat(path).st_mtime * 1000)

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

    def rmtree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def open(self, path: str, *, create: bool = False, truncate: bool = False) -> RealFile:
        flags = os.O_RDWR | (os.O_CREAT if create else 0) | (os.O_TRUNC if truncate else 0)
        return RealFile(os.open(path, flags, 0o644))

    def lock(self, path: str) -> RealFile:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BaseException:
            os.close(fd)
            raise
        return RealFile(fd)


# ---------------------------------------------------------------- memory


class PowerCut(BaseException):
    """The in-memory disk lost power (MemoryFileSystem.cut_power_after).

    A BaseException, so that storage code's handlers of OSError and
    Exception do not mistake it for an I/O error they may recover from:
    the process is as good as dead until the disk's crash()."""


@dataclass(eq=False)
class _File:
    data: bytearray = field(default_factory=bytearray)
    synced: bytes = b""
    mtime_ms: int = 0


class MemoryFile:
    """A handle on a MemoryFileSystem file; dead (EIO) once the disk crashed or it closed."""

    __slots__ = ("_fs", "_file", "_generation", "path")

    def __init__(self, fs: "MemoryFileSystem", f: _File, path: str) -> None:
        self._fs, self._file, self._generation, self.path = fs, f, fs._generation, path

    def _live(self) -> _File:
        if self._generation != self._fs._generation:
            raise OSError(errno.EIO if self._generation >= 0 else errno.EBADF, "handle is dead (closed, or opened before a crash)", self.path)
        return self._file

    def pread(self, size: int, position: int) -> bytes:
        return bytes(self._live().data[position : position + size])

    def readinto(self, buffer: memoryview, position: int) -> int:
        chunk = self._live().data[position : position + len(buffer)]
        buffer[: len(chunk)] = chunk
        return len(chunk)

    def pwrite(self, data: bytes | bytearray | memoryview, position: int) -> int:
        f = self._live()
        self._fs._mutate()
        n = len(data)
        end = position + n
        if end > len(f.data):
            self._fs._charge(end - len(f.data))
            if position > len(f.data):
                f.data.extend(bytes(position - len(f.data)))
        f.data[position:end] = data
        f.mtime_ms = self._fs._now_ms()
        return n

    def size(self) -> int:
        return len(self._live().data)

    def truncate(self, size: int) -> None:
        f = self._live()
        self._fs._mutate()
        if size > len(f.data):
            self._fs._charge(size - len(f.data))
            f.data.extend(bytes(size - len(f.data)))
        else:
            self._fs._used -= len(f.data) - size
            del f.data[size:]
        f.mtime_ms = self._fs._now_ms()

    def fsync(self) -> None:
        f = self._live()
        self._fs._mutate()
        f.synced = bytes(f.data)

    def close(self) -> None:
        self._generation = -1


class _LockHandle(MemoryFile):
    """The handle of a held lock: closing it releases the lock (as closing a flock'd descriptor does)."""

    __slots__ = ()

    def close(self) -> None:
        if self._generation == self._fs._generation:
            self._fs._locks.discard(self.path)
        self._generation = -1


class MemoryFileSystem:
    """An in-memory disk that loses what was not made durable when it `crash()`es."""

    def __init__(self, max_bytes: int = 1 << 30, *, now_ms: Callable[[], int] | None = None) -> None:
        self.max_bytes = max_bytes
        self._now_ms = now_ms or (lambda: 0)  # mtimes (a ManualClock's now_ms in the simulator)
        self._files: dict[str, _File] = {}  # the live namespace
        # What survives a crash: path -> synced bytes, for names made durable.
        self._durable_names: dict[str, _File] = {}
        self._dirs: set[str] = {"/"}
        self._locks: set[str] = set()
        self._used = 0
        self._generation = 0  # bumped by crash(): handles of the old incarnation die
        self.crashes = 0
        self.mutations = 0  # mutating operations so far (tests count a workload's crash points)
        self._cut_at: int | None = None  # PowerCut at this mutation count, and after it

    # ------------------------------------------------------------ reads

    def exists(self, path: str) -> bool:
        path = _norm(path)
        return path in self._files or path in self._dirs

    def is_file(self, path: str) -> bool:
        return _norm(path) in self._files

    def is_dir(self, path: str) -> bool:
        return _norm(path) in self._dirs

    def file_size(self, path: str) -> int:
        return len(self._file(path).data)

    def mtime_ms(self, path: str) -> int:
        return self._file(path).mtime_ms

    def read_bytes(self, path: str) -> bytes:
        return bytes(self._file(path).data)

    def listdir(self, path: str) -> list[str]:
        path = _norm(path)
        if path not in self._dirs:
            raise FileNotFoundError(errno.ENOENT, "no such directory", path)
        names = {posixpath.basename(p) for p in self._files if posixpath.dirname(p) == path}
        names |= {posixpath.basename(d) for d in self._dirs if d != path and posixpath.dirname(d) == path}
        return sorted(names)

    def synced_bytes(self, path: str) -> bytes:
        """What the file would hold after a crash now (tests)."""
        return self._file(path).synced

    # ------------------------------------------------------------ writes

    def makedirs(self, path: str) -> None:
        path = _norm(path)
        self._check_power()
        if path in self._files:
            raise FileExistsError(errno.EEXIST, "a file is in the way", path)
        while path not in self._dirs:
            self._dirs.add(path)
            path = posixpath.dirname(path)

    def write_bytes(self, path: str, data: bytes) -> None:
        path = self._creatable(path)
        self._mutate()
        f = self._files.get(path)
        if f is None:
            f = self._files[path] = _File()
        self._charge(len(data) - len(f.data))
        f.data = bytearray(data)
        f.mtime_ms = self._now_ms()

    def append(self, path: str, data: bytes) -> None:
        path = self._creatable(path)
        self._mutate()
        self._charge(len(data))
        f = self._files.setdefault(path, _File())
        f.data += data
        f.mtime_ms = self._now_ms()

    def fsync(self, path: str) -> None:
        f = self._file(path)
        self._mutate()
        f.synced = bytes(f.data)

    def fsync_dir(self, path: str) -> None:
        path = _norm(path)
        self._mutate()
        for p in [p for p in self._durable_names if posixpath.dirname(p) == path]:
            if self._files.get(p) is not self._durable_names[p]:
                del self._durable_names[p]
        for p, f in self._files.items():
            if posixpath.dirname(p) == path:
                self._durable_names[p] = f

    def replace(self, src: str, dst: str) -> None:
        src, dst = _norm(src), self._creatable(dst)
        self._mutate()
        if src in self._dirs:
            self._move_tree(src, dst)
            return
        f = self._file(src)
        old = self._files.get(dst)
        if old is not None and old is not f:
            self._used -= len(old.data)
        self._files[dst] = f
        del self._files[src]

    def unlink(self, path: str) -> None:
        f = self._file(path)
        self._mutate()
        self._used -= len(f.data)
        del self._files[_norm(path)]

    def rmtree(self, path: str) -> None:
        root = _norm(path)
        self._mutate()
        prefix = root.rstrip("/") + "/"
        for p in [p for p in self._files if p.startswith(prefix)]:
            self._used -= len(self._files.pop(p).data)
        for p in [p for p in self._durable_names if p.startswith(prefix)]:
            del self._durable_names[p]
        self._dirs = {d for d in self._dirs if d != root and not d.startswith(prefix)} | {"/"}

    def open(self, path: str, *, create: bool = False, truncate: bool = False) -> MemoryFile:
        norm = _norm(path)
        self._check_power()
        f = self._files.get(norm)
        if f is None:
            if not create:
                raise FileNotFoundError(errno.ENOENT, "no such file", path)
            self._mutate()
            f = self._files[self._creatable(norm)] = _File(mtime_ms=self._now_ms())
        elif norm in self._dirs:
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        handle = MemoryFile(self, f, norm)
        if truncate:
            handle.truncate(0)
        return handle

    def lock(self, path: str) -> MemoryFile:
        norm = _norm(path)
        if norm in self._locks:
            raise BlockingIOError(errno.EWOULDBLOCK, "locked", path)
        handle = self.open(norm, create=True)
        self._locks.add(norm)
        return _LockHandle(self, handle._file, norm)

    # ------------------------------------------------------------ faults

    def cut_power_after(self, mutations: int | None) -> None:
        """PowerCut instead of the `mutations`-th mutating operation from now
        (1: the very next one), and on every operation after it until
        crash(); None disarms."""
        self._cut_at = None if mutations is None else self.mutations + max(1, mutations)

    def _check_power(self) -> None:
        if self._cut_at is not None and self.mutations + 1 >= self._cut_at:
            raise PowerCut(f"power cut at mutation {self._cut_at}")

    def _mutate(self) -> None:
        self._check_power()
        self.mutations += 1

    def crash(self, *, keep_torn_bytes: int = 0, rng: random.Random | None = None) -> None:
        """A power cut: every file goes back to its synced bytes and every
        name to its last durable directory entry. `keep_torn_bytes` keeps
        that many bytes of each file's unsynced tail (a torn write); with
        `rng`, each file keeps a random prefix of its unsynced tail instead
        (seeded by the caller, so a failing case replays). Handles opened
        before the crash are dead afterwards, and locks are released (the
        process that held them is gone)."""
        survivors: dict[str, _File] = {}
        for path, f in sorted(self._durable_names.items()):
            tail = b""
            if f.data[: len(f.synced)] == f.synced:  # only appends since the sync: a prefix may have landed
                unsynced = len(f.data) - len(f.synced)
                keep = rng.randint(0, unsynced) if rng is not None and unsynced > 0 else keep_torn_bytes
                tail = bytes(f.data[len(f.synced) : len(f.synced) + keep])
            survivors[path] = _File(bytearray(f.synced + tail), f.synced, f.mtime_ms)
        self._files = survivors
        self._durable_names = dict(survivors)
        self._used = sum(len(f.data) for f in survivors.values())
        self._locks.clear()
        self._generation += 1
        self.crashes += 1
        self._cut_at = None

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
        if path in self._dirs:
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        return path

    def _charge(self, extra: int) -> None:
        if extra > 0 and self._used + extra > self.max_bytes:
            raise OSError(errno.ENOSPC, "in-memory disk full")
        self._used += extra

    def _move_tree(self, src: str, dst: str) -> None:
        if dst in self._dirs or dst in self._files:
            raise FileExistsError(errno.EEXIST, "destination exists", dst)
        prefix = src.rstrip("/") + "/"

        def moved(p: str) -> str:
            return dst + p[len(src):] if p == src or p.startswith(prefix) else p

        self._files = {moved(p): f for p, f in self._files.items()}
        self._durable_names = {moved(p): f for p, f in self._durable_names.items()}
        self._dirs = {moved(d) for d in self._dirs}


def _norm(path: str) -> str:
    path = str(path)
    return posixpath.normpath(path if path.startswith("/") else "/" + path)
