#!/usr/bin/env python3
"""gtest_batches.py BUILD_DIR CTEST-SELECTION...: runs the tests ctest would
select in BUILD_DIR, one process per test program instead of one per test.

ctest runs each test that gtest_discover_tests registered as a process of
its own (--gtest_filter=Suite.Test).  In a sanitizer tree a process costs
about 0.2 s before its first test (the instrumented program's start, the
runtime's shadow memory), and the unit and BPF tiers are some 420 short
tests: a third of their time went to starting processes (tools/test,
"asan").  Here the tests ctest selects (`ctest --show-only=json-v1` with
the same arguments, so the selection is ctest's own) are grouped by
program, working directory and environment, and each group runs as one
process with all its names in one filter.

Nothing is lost on the way: a group whose program ran another number of
tests than it was given is a failure naming both counts; skipped tests are
listed (ctest counted them as skipped: they fail nothing there either); a
test that is not a gtest one (no --gtest_filter) runs through ctest as
before.  A failed group prints its whole output.  Exit status 1 when any
group or ctest test failed, 2 on bad arguments.
"""
import collections
import json
import os
import re
import subprocess
import sys
import time

BOUND_S = 900  # per program, as tools/test gives ctest per test


def selected(build, args):
    r = subprocess.run(["ctest", "--show-only=json-v1", *args], cwd=build, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"gtest_batches: ctest --show-only in {build} failed: {r.stderr.strip()}")
    return json.loads(r.stdout).get("tests", [])


def groups_of(tests):
    """{(program, cwd, env): [names]} for gtest tests, and the others' names."""
    groups, others = collections.OrderedDict(), []
    for t in tests:
        cmd = t.get("command") or []
        filt = [a for a in cmd if a.startswith("--gtest_filter=")]
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        if not filt or len(cmd) < 2:
            others.append(t["name"])
            continue
        key = (cmd[0], props.get("WORKING_DIRECTORY"), tuple(props.get("ENVIRONMENT", [])))
        groups.setdefault(key, []).append(filt[0].split("=", 1)[1])
    return groups, others


def run_group(program, cwd, env, names):
    """Runs one program over @names; returns (ok, summary line)."""
    environ = dict(os.environ)
    environ.update(e.split("=", 1) for e in env)
    t0 = time.monotonic()
    try:
        r = subprocess.run([program, "--gtest_filter=" + ":".join(names), "--gtest_also_run_disabled_tests"],
                           cwd=cwd, env=environ, capture_output=True, text=True, errors="replace",
                           timeout=BOUND_S)
        out, rc = r.stdout + r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        out += f"\ngtest_batches: {program} did not end within {BOUND_S} s\n"
        rc = -1
    secs = time.monotonic() - t0
    ran = re.search(r"^\[==========\] (\d+) tests? from .* ran\.", out, re.M)
    problems = []
    if rc != 0:
        problems.append(f"exit status {rc}")
    if not ran:
        problems.append("no gtest summary (the program ended before its tests did)")
    elif int(ran.group(1)) != len(names):
        problems.append(f"ran {ran.group(1)} tests of the {len(names)} selected")
    skipped = re.findall(r"^\[  SKIPPED \] ([A-Za-z0-9_]+\.[A-Za-z0-9_/]+)", out, re.M)
    name = os.path.basename(program)
    if problems:
        print(out, flush=True)
    for s in sorted(set(skipped)):
        print(f"gtest_batches: {name}: SKIPPED {s}", flush=True)
    verdict = "ok" if not problems else "FAILED (" + "; ".join(problems) + ")"
    return not problems, f"{name}: {len(names)} tests in {secs:.1f} s: {verdict}"


def main():
    if len(sys.argv) < 2 or not os.path.isdir(sys.argv[1]):
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        sys.exit(2)
    build, args = sys.argv[1], sys.argv[2:]
    tests = selected(build, args)
    if not tests:
        sys.exit(f"gtest_batches: ctest selects no test in {build} with {' '.join(args)}")
    groups, others = groups_of(tests)
    failed = []
    for (program, cwd, env), names in groups.items():
        ok, line = run_group(program, cwd, env, names)
        print("gtest_batches: " + line, flush=True)
        if not ok:
            failed.append(os.path.basename(program))
    if others:
        r = subprocess.run(["ctest", "--output-on-failure", "--timeout", str(BOUND_S), "-R",
                            "^(" + "|".join(re.escape(n) for n in others) + ")$"], cwd=build)
        if r.returncode != 0:
            failed.append("ctest: " + " ".join(others))
    total = sum(len(n) for n in groups.values()) + len(others)
    print(f"gtest_batches: {total} tests, {len(groups)} programs and {len(others)} other tests: " +
          ("all passed" if not failed else "FAILED: " + ", ".join(failed)), flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
