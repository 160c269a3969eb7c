#!/usr/bin/env python3
"""check-skips.py BUILD_DIR [JUNIT]: after `ctest --test-dir BUILD_DIR --output-junit ctest-junit.xml`, lists
every skip of that run with its reason and fails unless

- ctest's "did not run" list and the skip lines agree: every entry ctest did not run printed a line
  "lockstep-skip: <case>: <reason>" and exited 77 (its SKIP_RETURN_CODE), and no entry that ran printed
  one (a skip ctest would count as passed); an entry not run for another reason (a fixture that failed,
  DISABLED) fails too;
- each skip is allowed for this build in tests/allowed-skips.txt (cases no CI machine can meet: a GPU, a
  kernel the LibTorch version lacks). The build is "1.13" or "2.x" by the LibTorch it was configured with.

JUNIT defaults to BUILD_DIR/ctest-junit.xml (ctest writes --output-junit paths relative to the build dir).
"""
import pathlib
import re
import sys
import xml.etree.ElementTree as ET

SKIP_LINE = re.compile(r"^lockstep-skip: (.*?): (.*)$")


def fail_usage(message):
    print(f"check-skips: {message}", file=sys.stderr)
    sys.exit(2)


def build_key(build):
    env = build / "lockstep_test_env.cmake"
    if not env.is_file():
        fail_usage(f"{env} not found: is {build} a configured lockstep build?")
    found = re.search(r"set\(LOCKSTEP_TORCH_VERSION \[==\[([0-9]+)\.([0-9]+)", env.read_text())
    if not found:
        fail_usage(f"{env} names no LOCKSTEP_TORCH_VERSION")
    major, minor = found.groups()
    return f"{major}.{minor}" if major == "1" else f"{major}.x"


def allowed_skips(source):
    """(build, ctest entry, reason prefix) of every line of tests/allowed-skips.txt."""
    allowed = []
    path = source / "tests" / "allowed-skips.txt"
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split(None, 2)
        if len(fields) != 3 or fields[0] not in ("1.13", "2.x", "any"):
            fail_usage(f"{path}:{number}: expected '<1.13|2.x|any> <ctest entry> <reason>  # why', got {line!r}")
        allowed.append(tuple(fields))
    return allowed


def main():
    if len(sys.argv) not in (2, 3):
        fail_usage("usage: check-skips.py BUILD_DIR [JUNIT]")
    build = pathlib.Path(sys.argv[1])
    junit = pathlib.Path(sys.argv[2]) if len(sys.argv) == 3 else build / "ctest-junit.xml"
    if not junit.is_file():
        fail_usage(f"{junit} not found (run ctest --test-dir {build} --output-junit ctest-junit.xml first)")
    key = build_key(build)
    allowed = allowed_skips(pathlib.Path(__file__).resolve().parent.parent)

    problems, skips = [], []
    for test in ET.parse(junit).getroot().iter("testcase"):
        name, status = test.get("name"), test.get("status")
        output = test.findtext("system-out") or ""
        lines = [m.groups() for m in map(SKIP_LINE.match, output.splitlines()) if m]
        skipped = test.find("skipped")
        why_not_run = skipped.get("message", "") if skipped is not None else ""
        if status == "notrun" and why_not_run == "SKIP_RETURN_CODE=77":
            if not lines:
                problems.append(f"{name}: exited 77 (skipped) without a line 'lockstep-skip: <case>: <reason>'")
            skips += [(name, case, reason) for case, reason in lines]
        elif status in ("notrun", "disabled"):
            problems.append(f"{name}: did not run ({why_not_run or status})")
        elif lines:
            problems.append(f"{name}: printed a skip line ({lines[0][0]}: {lines[0][1]}) but ctest counted it "
                            f"as {status}: a skip must exit 77")

    for name, case, reason in skips:
        ok = any(b in (key, "any") and entry == name and reason.startswith(prefix) for b, entry, prefix in allowed)
        verdict = "allowed    " if ok else "NOT ALLOWED"
        print(f"  {verdict} {name}  {case}: {reason}")
        if not ok:
            problems.append(f"{name}: a skip that tests/allowed-skips.txt does not allow for build {key}")
    print(f"check-skips: {len(skips)} skip(s) in {build} (LibTorch {key})")
    if problems:
        for problem in problems:
            print(f"check-skips: {problem}", file=sys.stderr)
        print("check-skips: fix the machine or the test (tests/allowed-skips.txt lists the only skips CI accepts, "
              "per build)", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
