"""The reference against XLA:CPU's recorded outputs (xladist/conformance/data/xla_cpu.json.gz,
tools/gen_conformance_xla.py): equal on every recorded case, except the recorded deviations,
each one of the known ways XLA:CPU's runtime departs from IEEE arithmetic."""

import pytest

from xladist.conformance import recorded
from xladist.conformance.checks import digest
from xladist.conformance.reference import reference_run
from xladist.conformance.suite import Plan, generated_units

KNOWN = {"subnormals are flushed to zero", "the sign of a zero sum is lost",
         "min/max drop a NaN", "a NaN payload or sign is not kept"}


def test_the_recording_ships_with_the_package():
    table = recorded.recorded()
    assert table["jax"] and len(table["cases"]) > 1000
    for name, why in table["deviations"].items():
        assert name in table["cases"] and set(why.split(", ")) <= KNOWN, (name, why)


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_the_reference_gives_what_xla_cpu_gave(n):
    table = recorded.recorded()
    seen = agree = 0
    for unit in generated_units(n, Plan(xla=False)):
        names = {c.name for c in unit.cases}
        if not names & table["cases"].keys():
            continue
        prog = unit.program
        want, _ = reference_run(prog.text(), prog.per_device_inputs(), prog.n,
                                device_assignment=prog.da)
        for c in prog.checks:
            if c.name not in table["cases"]:
                continue
            values = [v for d in range(n) for v in want[d][c.first_leaf:c.first_leaf + c.leaves]]
            status, why = recorded.check(c.name, digest(values, c.exact))
            assert status in ("agrees", "deviation"), f"{c.name}: {why}"
            seen += 1
            agree += status == "agrees"
    assert seen > 200 and agree > 0.9 * seen


def test_a_disagreement_is_reported_as_a_suite_defect():
    name = next(n for n in recorded.recorded()["cases"]
                if n not in recorded.recorded()["deviations"])
    status, why = recorded.check(name, "0" * 16)
    assert status == "disagrees" and "defect of the conformance suite" in why
    assert recorded.check("n2/no/such/case", "0" * 16) == ("", "")
