"""What `xladist conformance` prints and writes: the matrix, one line per group mode and
device count, every failure with the command that reproduces it alone, JUnit XML, JSON."""

from __future__ import annotations

import json
import shlex
from collections import Counter, defaultdict
from xml.etree import ElementTree as ET

from .checks import ERROR, FAIL, FAILING, GAP, GAP_CLOSED, PASS, STATUSES, UNSUPPORTED
from .emit import ROWS
from .values import ALL_TYPES

LEGEND = ("ok: every case passed   F<k>: k cases failed   ns: not supported by the backend   "
          "ok~: passed, some not supported   gap: known xladist gap   .: no case")
SHOWN_FAILURES = 40
WIDTH = 100


def reproduce(name: str, n: int, options) -> str:
    """The command that runs one case alone."""
    parts = ["xladist", "conformance", "-n", str(n), "--backend", options.backend]
    if options.plan.full:
        parts.append("--full")
    if options.mpiexec:
        parts += ["--mpiexec", options.mpiexec]
    if options.hostfile:
        parts += ["--hostfile", options.hostfile]
    if options.timeout != 60.0:
        parts += ["--timeout", f"{options.timeout:g}"]
    return " ".join(shlex.quote(p) for p in parts + ["--select", name])


def _entries(results):
    for r in results:
        for v in r.verdicts:
            yield r, v, r.cases[v.case]


def _cell(counts: Counter) -> str:
    if not counts:
        return "."
    bad = counts[FAIL] + counts[ERROR] + counts[GAP_CLOSED]
    if bad:
        return f"F{bad}"
    if counts[PASS]:
        return "ok~" if counts[UNSUPPORTED] else "ok"
    if counts[GAP]:
        return "gap"
    return "ns"


def matrix(results) -> list[str]:
    """Rows = operations, columns = element types, over every device count run."""
    cells: dict = defaultdict(Counter)
    rows, columns = [], []
    for _, v, case in _entries(results):
        cells[(case.row, case.column)][v.status] += 1
        rows.append(case.row)
        columns.append(case.column)
    rows = [r for r in ROWS if r in rows] + sorted(set(rows) - set(ROWS))
    cols = [c for c in ALL_TYPES if c in columns] + sorted(set(columns) - set(ALL_TYPES))
    if not rows:
        return ["(no cases)"]
    label = max(len(r) for r in rows) + 2
    out = []
    for start in range(0, len(cols), max(1, (WIDTH - label) // 6)):
        part = cols[start:start + max(1, (WIDTH - label) // 6)]
        widths = [max(len(c), 4) + 1 for c in part]
        out.append(" " * label + "".join(c.rjust(w) for c, w in zip(part, widths)))
        for r in rows:
            out.append(r.ljust(label) + "".join(_cell(cells[(r, c)]).rjust(w)
                                                 for c, w in zip(part, widths)))
        out.append("")
    return out + [LEGEND]


def _summary(counts: Counter) -> str:
    words = {PASS: ("passed", "passed"), FAIL: ("failed", "failed"), ERROR: ("error", "errors"),
             UNSUPPORTED: ("not supported", "not supported"),
             GAP: ("known gap", "known gaps"),
             GAP_CLOSED: ("known gap now passing", "known gaps now passing")}
    total = sum(counts.values())
    parts = [f"{counts[s]} {words[s][counts[s] != 1]}"
             for s in (PASS, FAIL, ERROR, UNSUPPORTED, GAP, GAP_CLOSED) if counts[s] or s == PASS]
    return f"{total} case{'s' if total != 1 else ''}: " + ", ".join(parts)


def mode_lines(results) -> list[str]:
    """One line per device count and group mode (and per XLA source file)."""
    counts: dict = defaultdict(Counter)
    for r, v, case in _entries(results):
        key = (r.n, f"XLA {case.config}" if case.name.startswith("xla/") else case.mode)
        counts[key][v.status] += 1
    width = max((len(m) for _, m in counts), default=0)
    return [f"n={n:<3} {mode.ljust(width)}  {_summary(counts[(n, mode)])}"
            for n, mode in sorted(counts, key=lambda k: (k[0], k[1].startswith("XLA"), k[1]))]


def failures(results, options, limit: int = SHOWN_FAILURES) -> list[str]:
    out = []
    bad = [(r, v) for r, v, _ in _entries(results) if v.status in FAILING + (GAP_CLOSED,)]
    for r, v in bad[:limit]:
        detail = v.detail.strip().replace("\n", "\n      ")
        out.append(f"{v.status.upper()} {v.case}\n      {detail}\n"
                   f"      reproduce: {reproduce(v.case, r.n, options)}")
    if len(bad) > limit:
        out.append(f"... and {len(bad) - limit} more (--json FILE lists every case)")
    return out


def totals(results) -> Counter:
    return Counter(v.status for _, v, _ in _entries(results))


def text(results, options, seconds: float) -> str:
    counts = totals(results)
    head = (f"xladist conformance: backend {options.backend}, devices "
            f"{', '.join(str(r.n) for r in results)}"
            + (", the full matrix" if options.plan.full else "")
            + (f", select {' '.join(options.plan.select)}" if options.plan.select else ""))
    jobs = sum(r.jobs for r in results)
    lines = [head, ""] + matrix(results) + [""] + mode_lines(results) + [""]
    shown = failures(results, options)
    if shown:
        lines += shown + [""]
    lines.append(f"{_summary(counts)} ({jobs} MPI job{'s' if jobs != 1 else ''}, "
                 f"{seconds:.0f} s)")
    xla = Counter(v.xla for _, v, _ in _entries(results) if v.xla)
    if xla:
        lines.append(f"the reference was checked against XLA:CPU's recorded outputs on "
                     f"{sum(xla.values())} of these cases: it agrees on {xla['agrees']}; on "
                     f"{xla['deviation']} XLA:CPU departs from IEEE (docs/conformance.md)")
    return "\n".join(lines)


def write_json(path: str, results, options, seconds: float) -> None:
    from xladist.files import deliver
    cases = [{"name": v.case, "n": r.n, "row": c.row, "column": c.column, "mode": c.mode,
              "config": c.config, "status": v.status, "detail": v.detail, "device": v.device,
              "xla_cpu": v.xla, "reproduce": reproduce(v.case, r.n, options)}
             for r, v, c in _entries(results)]
    doc = {"backend": options.backend, "counts": [r.n for r in results],
           "full": options.plan.full, "select": list(options.plan.select),
           "seconds": round(seconds, 1), "totals": dict(totals(results)),
           "statuses": list(STATUSES), "cases": cases}
    data = (json.dumps(doc, indent=1) + "\n").encode()
    deliver(path, lambda f: f.write(data), "--json")


def write_junit(path: str, results, options, seconds: float) -> None:
    from xladist.files import deliver
    root = ET.Element("testsuites", name="xladist conformance", time=f"{seconds:.1f}")
    for r in results:
        counts = Counter(v.status for v in r.verdicts)
        suite = ET.SubElement(root, "testsuite", name=f"conformance.n{r.n}.{options.backend}",
                              tests=str(len(r.verdicts)), failures=str(counts[FAIL]
                                                                       + counts[GAP_CLOSED]),
                              errors=str(counts[ERROR]),
                              skipped=str(counts[UNSUPPORTED] + counts[GAP]),
                              time=f"{r.seconds:.1f}")
        for v in r.verdicts:
            case = r.cases[v.case]
            tc = ET.SubElement(suite, "testcase", name=v.case,
                               classname=f"n{r.n}.{case.row}.{case.column}")
            message = v.detail.splitlines()[0] if v.detail else v.status
            body = v.detail + "\nreproduce: " + reproduce(v.case, r.n, options)
            if v.status in (FAIL, GAP_CLOSED):
                ET.SubElement(tc, "failure", message=message).text = body
            elif v.status == ERROR:
                ET.SubElement(tc, "error", message=message).text = body
            elif v.status in (UNSUPPORTED, GAP):
                ET.SubElement(tc, "skipped", message=message).text = v.detail
    ET.indent(root)
    data = ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"
    deliver(path, lambda f: f.write(data), "--junit")
