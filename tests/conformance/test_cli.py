"""`xladist conformance` for real: MPI jobs, backends from entry points, and a kit that fails
when a backend gets a collective wrong, pinning each failure on its case, device and element
with a command that reproduces it alone (broken_backend/ holds the broken backends)."""

import json
import os
import re
import shlex
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from tests.cli_util import ROOT, xladist_cli

HERE = Path(__file__).resolve().parent
BROKEN = HERE / "broken_backend"
TOY = ROOT / "tests" / "backend_plugin"


def conformance(*args, timeout=600, plugins=()):
    path = os.pathsep.join([str(ROOT), *map(str, plugins)])
    return xladist_cli("conformance", *args, timeout=timeout, PYTHONPATH=path,
                       XLADIST_PROGRESS="off")


def _reproduce_lines(text):
    return [line.split("reproduce: ", 1)[1] for line in text.splitlines()
            if "reproduce: " in line]


def test_list_names_every_case_without_running():
    proc = conformance("-n", "2", "--list", "--select", "*/all-gather/*s8*")
    assert proc.returncode == 0, proc.stderr
    names = proc.stdout.split()
    assert names and all(re.fullmatch(r"n2/\dx\d/\w+/all-gather/ag_\w+_s8_\w+", n)
                         for n in names)


def test_device_counts_given_in_one_or_several_options_run_once_each():
    """-n 2 4 and -n 2 -n 4 -n 2 name the same two device counts, each run once."""
    lists = [conformance(*counts, "--list", "--select", "*/all-gather/*s8*")
             for counts in (("-n", "2", "4"), ("-n", "2", "-n", "4", "-n", "2"))]
    for proc in lists:
        assert proc.returncode == 0, proc.stderr
    names = lists[0].stdout.split()
    assert names == lists[1].stdout.split()
    assert {name.split("/")[0] for name in names} == {"n2", "n4"}
    assert len(names) == len(set(names))


def test_an_unknown_backend_is_an_error_before_any_job():
    for listing in ((), ("--list",)):  # --list too (it listed the cases and exited 0)
        proc = conformance("-n", "2", "--backend", "nope", *listing)
        assert proc.returncode == 2, (listing, proc.stdout[-200:])
        assert "backend 'nope' is not available" in proc.stderr and \
            "Traceback" not in proc.stderr


def test_no_matching_case_fails():
    proc = conformance("-n", "2", "--select", "nothing-like-this")
    assert proc.returncode == 1 and "no case matched" in proc.stderr
    # a name without its path matches nothing: the message names the pattern and the way
    proc = conformance("-n", "2", "--select", "all-gather")
    assert proc.returncode == 1
    assert "no case matched --select 'all-gather' (a pattern matches the whole name, as " \
           "'*/all-gather/*' would; --list shows the names)" in proc.stderr, proc.stderr


def test_the_pattern_suggested_for_a_selection_of_nothing_matches():
    """Before: --select 'all-gather/*' (the op's part of the name, not the whole name)
    suggested "as '*/all-gather//*' would", a pattern that matches nothing either."""
    proc = conformance("-n", "2", "--select", "all-gather/*")
    assert proc.returncode == 1
    suggested = re.search(r"as '([^']*)' would", proc.stderr)
    assert suggested and suggested.group(1) == "*/all-gather/*", proc.stderr
    listed = conformance("-n", "2", "--list", "--select", suggested.group(1))
    assert listed.returncode == 0 and listed.stdout.split(), listed.stderr


@pytest.mark.slow
def test_interpreter_passes_and_writes_junit_and_json(tmp_path):
    junit, js = tmp_path / "r.xml", tmp_path / "r.json"
    proc = conformance("-n", "2", "--backend", "interpreter", "--select", "*_s32_*",
                       "--select", "*/send-recv/*f16*", "--junit", junit, "--json", js)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^all-reduce add +ok", proc.stdout, re.M)  # columns: s32, f16
    assert re.search(r"^n=2 +cross_replica +\d+ cases: \d+ passed$", proc.stdout, re.M)
    suites = ET.parse(junit).getroot().findall("testsuite")
    assert len(suites) == 1 and int(suites[0].get("tests")) > 50
    assert suites[0].get("failures") == "0" and suites[0].get("errors") == "0"
    doc = json.loads(js.read_text())
    assert doc["totals"] == {"pass": int(suites[0].get("tests"))}
    assert all(c["reproduce"].startswith("xladist conformance -n 2 --backend interpreter")
               for c in doc["cases"])


@pytest.mark.slow
def test_mpiexec_and_hostfile_reach_the_job(tmp_path):
    """--mpiexec starts the ranks (here a wrapper that records its arguments, then runs the
    wheel's mpiexec) and --hostfile reaches it as -f FILE."""
    from xladist.collectives.mpiexec import find_mpiexec
    hosts, log = tmp_path / "hosts", tmp_path / "argv"
    hosts.write_text("localhost:4\n")
    wrapper = tmp_path / "my-mpiexec"
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" >> {shlex.quote(str(log))}\n'
                       f'exec {shlex.quote(find_mpiexec())} "$@"\n')
    wrapper.chmod(0o755)
    proc = conformance("-n", "2", "--backend", "interpreter", "--mpiexec", wrapper,
                       "--hostfile", hosts, "--select", "*/all-gather/*s8*")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^\d+ cases: (\d+) passed \(1 MPI job", proc.stdout, re.M), proc.stdout
    argv = log.read_text().splitlines()
    assert argv[argv.index("-f") + 1] == str(hosts) and argv[argv.index("-n") + 1] == "2"


@pytest.mark.slow
def test_flush_to_zero_fails_with_the_element_and_a_command_that_reproduces_it(tmp_path):
    junit = tmp_path / "r.xml"
    proc = conformance("-n", "2", "--backend", "broken-ftz", "--select",
                       "*/1x2/default/all-reduce/*f32_edge*", "--junit", junit,
                       plugins=[BROKEN])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    # subnormal sums: 2 * min_subnormal (0x2) and the largest subnormal (0x7fffff) became 0
    assert re.search(r"^FAIL n2/1x2/default/all-reduce/ar_\w+_f32_edge_add_sync\n +device \d,"
                     r" result 0: element \[\d+\]: got 0\.0 \(0x00000000\), expected "
                     r"[\d.e-]+ \(0x00(000002|7fffff)\)", out, re.M), out
    assert re.search(r"^all-reduce add .* F\d", out, re.M)
    assert re.search(r"^all-reduce multiply .* F\d", out, re.M)  # min_subnormal * 1
    assert re.search(r"^all-reduce maximum .* F\d", out, re.M)
    failures = ET.parse(junit).getroot().findall(".//failure")
    assert failures and "reproduce: xladist conformance" in failures[0].text
    # the printed command runs that one case alone, and it fails alone too
    command = _reproduce_lines(out)[0]
    args = shlex.split(command)[2:]
    again = conformance(*args, plugins=[BROKEN])
    assert again.returncode == 1 and "1 case: 0 passed, 1 failed" in again.stdout, \
        again.stdout + again.stderr


@pytest.mark.slow
def test_lost_nan_payloads_fail_data_movement():
    proc = conformance("-n", "2", "--backend", "broken-nan", "--select",
                       "*/2x1/*/all-gather/*_edge_sync", plugins=[BROKEN])
    assert proc.returncode == 1
    # the quiet NaN with payload 5 came back as the canonical NaN
    assert re.search(r"result 0: element \[\d+\]: got nan \(0x7ff80+\), expected nan "
                     r"\(0x7ff80+5\)", proc.stdout), proc.stdout
    assert re.search(r"^all-gather .*F\d", proc.stdout, re.M)


@pytest.mark.slow
def test_unsupported_ops_are_cells_not_failures():
    proc = conformance("-n", "2", "--backend", "broken-no-a2a", "--select", "*/1x2/default/*s8*",
                       plugins=[BROKEN])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^all-to-all +ns$", proc.stdout, re.M)  # one column: s8
    assert re.search(r"^all-gather +ok$", proc.stdout, re.M)
    assert re.search(r"^async start/done +ok~$", proc.stdout, re.M)
    assert re.search(r"\d+ not supported", proc.stdout)


@pytest.mark.slow
def test_a_crash_is_pinned_on_its_case_and_the_rest_still_runs():
    proc = conformance("-n", "2", "--backend", "broken-crash", "--timeout", "20", "--select",
                       "*/1x2/default/collective-permute/*_sync", "--select",
                       "*/1x2/default/collective-broadcast/*f64*", plugins=[BROKEN])
    assert proc.returncode == 1
    errors = re.findall(r"^ERROR (\S+)", proc.stdout, re.M)
    assert errors and all("f64" in e and "/collective-permute/" in e for e in errors), proc.stdout
    assert "while running it" in proc.stdout
    assert re.search(r"^collective-broadcast .* ok", proc.stdout, re.M)
    passed = int(re.search(r"(\d+) passed", proc.stdout.splitlines()[-1]).group(1))
    assert passed > 10 and re.search(r"\((\d+) MPI jobs", proc.stdout)


@pytest.mark.slow
def test_a_backend_from_an_installed_package_runs_the_suite():
    """tests/backend_plugin's toy backend: register, run `xladist conformance`, read."""
    proc = conformance("-n", "2", "--backend", "toy", "--select", "*/all-reduce/*_add_*",
                       plugins=[TOY])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "backend toy" in proc.stdout
    assert re.search(r"^all-reduce add( +ok){9}$", proc.stdout, re.M)  # no pred column


@pytest.mark.slow
def test_a_backend_printing_on_stdout_without_a_newline_still_passes():
    """Rank 0 answers on stdout; a backend's print(..., end="") there used to swallow every
    record after it (each case an ERROR 'the job exited with 0 while running it')."""
    proc = conformance("-n", "2", "--backend", "broken-chatty", "--select",
                       "*/1x2/default/all-gather/*s8*", plugins=[BROKEN])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^\d+ cases: (\d+) passed \(1 MPI job", proc.stdout, re.M), proc.stdout


def test_the_case_names_the_docs_show_exist():
    """docs/conformance.md and docs/BACKENDS.md show case names and the commands that rerun
    them; three named no case of the suite (one only in --full, two in none)."""
    docs = "".join((ROOT / "docs" / f).read_text() for f in ("conformance.md", "BACKENDS.md"))
    shown = set(re.findall(r"\b(n(\d)/\dx\d/\w+/[\w-]+/\w+)", docs))
    assert len(shown) >= 3
    for name, n in shown:
        proc = conformance("-n", n, "--list", "--select", name)
        assert proc.returncode == 0 and proc.stdout.split() == [name], (name, proc.stdout)
