"""What recording a capture's intent costs in syscalls, today and two
cheaper ways, measured before building either (notes/cost.md, session 13).

Every variant writes a body the size of a 1,000-message cursor (67 KB) and
is followed by the outcome save as memgate writes it today (temp file,
fsync, rename, no directory fsync):

- ``today``: the intent as memgate saves it (temp file, fsync, rename,
  directory fsync);
- ``journal``: the intent appended to a per-session file with ``fdatasync``;
- ``in place``: the intent written over a fixed file at offset 0 with
  ``fdatasync`` (no size change; a real design would need two slots).

Two situations: the same session again (its intent file exists), and a new
session each time (the first capture of a thread, what the capture-cost aim
measures: a per-session intent file is new there and needs the directory
fsync too). Figures are process CPU (user + system) and wall per capture,
in alternated rounds. Bounded: ``--captures`` per variant and round, in a
temporary directory (``--dir`` to choose the disk) removed at the end.

    python3 python/bench/intent_save_cost.py [--captures 300] [--rounds 3] [--dir PATH]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
import uuid
from typing import Callable

BODY = b"x" * 67_000


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Sessions:
    """A sessions directory and the ways of writing into it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fixed = self._open("fixed.intent", os.O_WRONLY | os.O_CREAT)
        os.pwrite(self.fixed, BODY, 0)
        os.fsync(self.fixed)
        self.journal = self._open("same.journal", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        self.sync_dir()

    def _open(self, name: str, flags: int) -> int:
        return os.open(os.path.join(self.path, name), flags, 0o600)

    def sync_dir(self) -> None:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def save(self, name: str, durable_rename: bool) -> None:
        temp = os.path.join(self.path, f"{name}.{os.getpid()}.tmp")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, BODY)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temp, os.path.join(self.path, name))
        if durable_rename:
            self.sync_dir()

    def append(self, fd: int) -> None:
        os.write(fd, BODY)
        os.fdatasync(fd)

    def reset_journal(self) -> None:
        os.ftruncate(self.journal, 0)


def variants(s: Sessions) -> dict[str, Callable[[], None]]:
    def today_same() -> None:
        s.save("same", True)
        s.save("same", False)

    def journal_same() -> None:
        s.append(s.journal)
        s.save("same", False)

    def in_place_same() -> None:
        os.pwrite(s.fixed, BODY, 0)
        os.fdatasync(s.fixed)
        s.save("same", False)

    def today_new() -> None:
        name = uuid.uuid4().hex
        s.save(name, True)
        s.save(name, False)

    def journal_new() -> None:
        name = uuid.uuid4().hex
        fd = os.open(os.path.join(s.path, name + ".journal"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            s.append(fd)
        finally:
            os.close(fd)
        s.sync_dir()
        s.save(name, False)

    return {
        "same session: today": today_same,
        "same session: journal": journal_same,
        "same session: in place": in_place_same,
        "new session: today": today_new,
        "new session: journal": journal_new,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--captures", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where the temporary sessions directory goes")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="memgate-intent-cost-", dir=args.dir)
    try:
        sessions = Sessions(root)
        ways = variants(sessions)
        print(f"intent + outcome saves, {len(BODY)} bytes each, {args.captures} captures per variant and round; "
              f"ms per capture, CPU (user + system) / wall")
        for round_ in range(1, args.rounds + 1):
            order = list(ways.items())
            shift = (round_ - 1) % len(order)
            for name, way in order[shift:] + order[:shift]:
                started_cpu, started_wall = cpu(), time.perf_counter()
                for _ in range(args.captures):
                    way()
                spent_cpu = (cpu() - started_cpu) / args.captures * 1e3
                spent_wall = (time.perf_counter() - started_wall) / args.captures * 1e3
                print(f"round {round_}  {name:<24} {spent_cpu:6.3f} / {spent_wall:6.3f}")
                sessions.reset_journal()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
