"""Reading a JUnit file pytest wrote: each test case's outcome."""

from __future__ import annotations

from pathlib import Path

from junitparser import JUnitXml


def outcomes_by_test(xml_path: Path) -> dict[str, str]:
    result = {}
    for suite in JUnitXml.fromfile(str(xml_path)):
        for case in suite:
            kinds = {type(r).__name__ for r in case.result}
            result[case.name] = "error" if "Error" in kinds else "failure" if "Failure" in kinds else "passed"
    return result
