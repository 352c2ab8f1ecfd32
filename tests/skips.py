#!/usr/bin/env python3
"""What a ctest run skipped, and why, from its JUnit file (ctest --output-junit).

Prints one line per skip, tab-separated: STAGE, NAME, REASON.
  - a test ctest did not run or counted as skipped (SKIP_RETURN_CODE, DISABLED): NAME is the test's,
    REASON its last output line that starts with "SKIPPED:" (the suite's scripts print one before
    they exit 77), else ctest's own message;
  - a doctest case a `doctest::skip` decorator left out of a test that ran: NAME is
    'TEST: "CASE"', REASON what tests/main.cpp printed for it ('SKIPPED: "CASE": REASON').

Usage: tests/skips.py STAGE JUNIT_FILE
"""
import sys
import xml.etree.ElementTree as ET

PREFIX = "SKIPPED:"


def skip_lines(text):
    return [line[len(PREFIX):].strip() for line in (text or "").splitlines() if line.startswith(PREFIX)]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[-1])
    stage, path = sys.argv[1], sys.argv[2]
    root = ET.parse(path).getroot()
    for case in root.iter("testcase"):
        name = case.get("name", "?")
        lines = skip_lines(case.findtext("system-out"))
        skipped = case.find("skipped")
        if case.get("status") in ("notrun", "disabled") or skipped is not None:
            if lines:
                reason = lines[-1]
            elif skipped is not None and skipped.get("message"):
                reason = "gave no reason (ctest: " + skipped.get("message") + ")"
            else:
                reason = "gave no reason (ctest: " + case.get("status", "?") + ")"
            print(f"{stage}\t{name}\t{reason}")
            continue
        for line in lines:  # doctest cases held back inside a test that ran: '"CASE": REASON'
            if line.startswith('"') and '": ' in line[1:]:
                end = line.index('": ', 1)
                print(f"{stage}\t{name}: {line[:end + 1]}\t{line[end + 3:]}")
            else:
                print(f"{stage}\t{name}\t{line}")


if __name__ == "__main__":
    main()
