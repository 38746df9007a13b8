"""A small etcd-style data-driven test runner for the pure cores.

A script is a sequence of blocks:

    command key=value ...
    ----
    expected output, one line per effect
    <blank line>

Lines starting with '#' between blocks are comments. The runner feeds each
command to a handler and compares its output with the expected text. Set
KREF_REWRITE=1 to write the actual outputs back into the script (then read the
diff: a rewrite is a claim that the new behaviour is right).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass
class Block:
    command: str
    args: dict[str, str]
    expected: str
    line: int
    comments: list[str]


def parse(text: str) -> list[Block]:
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    comments: list[str] = []
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("#"):
            comments.append(line)
        if not line or line.startswith("#"):
            i += 1
            continue
        start = i + 1
        parts = line.split()
        args = {}
        for p in parts[1:]:
            key, _, value = p.partition("=")
            args[key] = value
        i += 1
        if i >= len(lines) or lines[i].strip() != "----":
            raise ValueError(f"line {i + 1}: expected ---- after command {line!r}")
        i += 1
        out = []
        while i < len(lines) and lines[i].strip():
            out.append(lines[i].rstrip())
            i += 1
        blocks.append(Block(parts[0], args, "\n".join(out), start, comments))
        comments = []
    return blocks


def render(blocks: list[Block], outputs: list[str]) -> str:
    chunks = []
    for b, out in zip(blocks, outputs):
        cmd = " ".join([b.command] + [f"{k}={v}" if v else k for k, v in b.args.items()])
        comments = "".join(c + "\n" for c in b.comments)
        chunks.append(f"{comments}{cmd}\n----\n{out}\n")
    return "\n".join(chunks)


def run_script(path: Path, handle: Callable[[Block], str]) -> None:
    text = path.read_text()
    blocks = parse(text)
    outputs = [handle(b) for b in blocks]
    if os.environ.get("KREF_REWRITE"):
        path.write_text(render(blocks, outputs))
        return
    for b, out in zip(blocks, outputs):
        assert out == b.expected, f"{path.name}:{b.line}: {b.command} {b.args}\n--- expected\n{b.expected}\n--- actual\n{out}"
