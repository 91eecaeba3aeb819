"""How the launching process and rank 0 of a conformance job talk.

The spec goes to every rank on the command line (JSON); rank 0 answers on its stdout, one
line per event: MARK, a space, then the record pickled, zlib-compressed and base64-encoded
(outputs are numpy arrays of every element type, ml_dtypes' included). Anything else on
stdout (a backend's own prints, even one without a newline that the record then follows on
the same line) is kept as the job's log, shown with its stderr when the job fails.

Work items: [u] is unit u of the table every rank builds, [u, c] its case c alone. A work
list is written compactly: "0-41,42.3,42.4,43-50".
"""

from __future__ import annotations

import base64
import json
import pickle
import zlib

MARK = b"@xladist-conformance@"


def writer(stream):
    def say(record: dict) -> None:
        blob = base64.b64encode(zlib.compress(pickle.dumps(record, protocol=4), 1))
        stream.write(MARK + b" " + blob + b"\n")
        stream.flush()
    return say


def split_line(line: bytes) -> tuple[bytes, dict | None]:
    """A line of the job's stdout as (the text that is not a record, the record or None).
    A record starts wherever MARK is: a backend that printed without a newline has its
    text before it, on the same line."""
    at = line.find(MARK + b" ")
    if at < 0:
        return line, None
    blob = line[at + len(MARK) + 1:].strip()
    return line[:at], pickle.loads(zlib.decompress(base64.b64decode(blob)))


def read_line(line: bytes) -> dict | None:
    """The record on a line of rank 0's stdout, None for any other line."""
    return split_line(line)[1]


def write_spec(spec: dict) -> str:
    return json.dumps(spec, separators=(",", ":"))


def read_spec(text: str) -> dict:
    return json.loads(text)


def encode_work(items: list[list[int]]) -> str:
    parts: list[str] = []
    run: list[int] = []

    def close():
        if run:
            parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
            run.clear()
    for item in items:
        if len(item) == 1 and run and item[0] == run[-1] + 1:
            run.append(item[0])
        elif len(item) == 1:
            close()
            run.append(item[0])
        else:
            close()
            parts.append(f"{item[0]}.{item[1]}")
    close()
    return ",".join(parts)


def decode_work(text: str) -> list[list[int]]:
    out: list[list[int]] = []
    for part in filter(None, text.split(",")):
        if "." in part:
            u, c = part.split(".")
            out.append([int(u), int(c)])
        elif "-" in part:
            a, b = part.split("-")
            out.extend([u] for u in range(int(a), int(b) + 1))
        else:
            out.append([int(part)])
    return out
