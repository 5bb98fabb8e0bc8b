"""Where a capture's CPU goes, from a `perf` profile of capture_cost.py's
``--profile`` loop: every sample is put in the first phase (in the order
below) one of whose names appears anywhere in its call stack; the loop's
own Python GC is counted apart and left out of the shares.

    perf record -F 1999 --call-graph dwarf,16384 -o prof.data -p PID
    perf script -i prof.data -F comm,tid,ip,sym | python3 python/bench/perf_phases.py

(PID: the loop's, printed as ``looping: pid N``; release wheel, so the
frames carry symbols and line tables.)
"""

import collections
import sys

PHASES = [
    ("python GC (left out)", ["gc_collect_main"]),
    ("reading LangChain objects", ["_native::convert"]),
    ("signing (SHA-256, canonical JSON)", ["sign_all", "message_signature", "signature_of", "SequenceHasher",
                                           "sequence_digest", "HeadFingerprint", "Transcript::with_head"]),
    ("redaction", ["redact"]),
    ("payload building (converting, writing the wire JSON)", ["to_payload", "payload_of", "capture::prepare",
                                                             "write_wire", "Prepared>::push"]),
    ("cursor save (JSON, write, fsync, rename)", ["save_cursor", "save_optimistic", "save_body", "to_json<",
                                                 "Confirmation>::confirm"]),
    ("cursor load", ["load_cursor"]),
    ("plan / intent", ["CapturePlan", "advanced_to", "advanced"]),
    ("HTTP (body JSON, reqwest, sockets)", ["reqwest", "hyper", "client::", "recorder::"]),
    ("dropping the request's messages", ["drop_in_place<memgate_core::capture::CaptureRequest",
                                         "drop_in_place<alloc::vec::Vec<memgate_core::message::Message"]),
    ("dropping payloads", ["drop_in_place<alloc::vec::Vec<memgate_openviking::recorder::Prepared",
                           "drop_in_place<memgate_openviking::payload"]),
    ("capture filter", ["captureable"]),
    ("outbox", ["outbox", "rusqlite", "sqlite3"]),
    ("runtime park / wake", ["park", "Parker", "Condvar", "unpark", "wake", "notify"]),
    ("blocking pool", ["spawn_blocking", "spawn_inner", "blocking::pool"]),
    ("other Python", ["_Py", "Py"]),
]


def classify(stack: list[str], comm: str) -> str:
    for name, patterns in PHASES:
        if any(p in frame for frame in stack for p in patterns):
            return name
    return "other (" + comm + ")"


def main() -> None:
    counts: collections.Counter[str] = collections.Counter()
    stack: list[str] = []
    comm = ""
    for line in list(sys.stdin) + [""]:
        line = line.rstrip("\n")
        if not line.strip():
            if stack:
                counts[classify(stack, comm)] += 1
            stack, comm = [], ""
        elif not line.startswith(("\t", " ")):
            comm = line.split()[0]
        else:
            parts = line.strip().split(None, 1)
            stack.append(parts[-1])
    total = sum(counts.values())
    gc = counts.pop(PHASES[0][0], 0)
    print(f"{total} samples, python GC {100 * gc / max(total, 1):.1f}% (left out of the shares below)")
    for name, n in counts.most_common():
        print(f"{100 * n / max(total - gc, 1):6.1f}%  {name}")


if __name__ == "__main__":
    main()
