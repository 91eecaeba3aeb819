"""XLA:CPU's recorded outputs for the suite's programs (data/xla_cpu.json.gz, written by
tools/gen_conformance_xla.py with jax): per case, a digest of every device's values
(checks.digest). The kit checks its reference against them: a case where the two differ
is a defect of the suite, reported as an error -- except the recorded deviations, where
XLA:CPU's runtime departs from IEEE arithmetic or bit-exact movement (it flushes subnormals
to zero, loses the sign of a zero sum, drops NaNs in min/max reductions, and does not keep
bf16 NaN payloads) and the reference keeps to the semantics (docs/conformance.md)."""

from __future__ import annotations

import gzip
import json
from functools import cache
from importlib import resources

DATA = "xla_cpu.json.gz"


@cache
def recorded() -> dict:
    """{"jax": version, "cases": {name: digest}, "deviations": {name: why}, "refused": ...};
    empty tables when the file is not there."""
    try:
        blob = resources.files(__package__).joinpath("data", DATA).read_bytes()
    except (FileNotFoundError, OSError):
        return {"jax": None, "cases": {}, "deviations": {}, "refused": {}}
    return json.loads(gzip.decompress(blob))


def check(name: str, reference_digest: str) -> tuple[str, str]:
    """("", "") when the case is not recorded; ("agrees", "") when the reference agrees with
    XLA:CPU; ("deviation", why) for a recorded deviation; ("disagrees", text) otherwise."""
    table = recorded()
    want = table["cases"].get(name)
    if want is None:
        return "", ""
    if name in table["deviations"]:
        return "deviation", table["deviations"][name]
    if want == reference_digest:
        return "agrees", ""
    return "disagrees", (f"the reference disagrees with XLA:CPU's recorded outputs for this "
                         f"case (jax {table['jax']}): a defect of the conformance suite; "
                         "tools/gen_conformance_xla.py shows where")
