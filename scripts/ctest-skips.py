#!/usr/bin/env python3
"""How many tests a ctest run skipped, which, and why.

    scripts/ctest-skips.py JUNIT        (JUNIT: ctest --output-junit's file)

CTest's "100% tests passed, 0 tests failed out of N" counts a test that
skipped (exit 77: SKIP_RETURN_CODE, no GPU, no Slurm, no torch) among the
passed.  This prints the count, then one line per skipped test: its name
and the last line it printed (every skip says why).  Exit 0 whatever was
skipped (a skip is not a failure); 2 when JUNIT cannot be read.
"""
import sys
import xml.etree.ElementTree as ET


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        cases = ET.parse(argv[1]).getroot().iter("testcase")
    except (OSError, ET.ParseError) as error:
        print(f"ctest-skips: cannot read {argv[1]}: {error}", file=sys.stderr)
        return 2
    total, skipped = 0, []
    for case in cases:
        total += 1
        if case.find("skipped") is None:
            continue
        out = case.findtext("system-out") or ""
        lines = [line.strip() for line in out.splitlines() if line.strip()]
        why = lines[-1] if lines else "(it printed nothing)"
        skipped.append((case.get("name"), why[:200]))
    print(f"ctest: {len(skipped)} of {total} tests skipped (counted among the passed by "
          f"CTest's \"tests passed\" line)" + (":" if skipped else ""))
    for name, why in skipped:
        print(f"  {name}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
