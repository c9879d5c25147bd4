"""Where things are: the repository, the test data, the bundled mcqa example."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
#: A Gym search root with the test benchmark ``minibench`` (an offline prepare script).
GYMROOT = DATA / "gymroot"
#: The JUnit schema pytest's own tests validate against (vendored; tests/unit/report/test_junit.py checks it).
JUNIT_XSD = DATA / "junit-10.xsd"
EXAMPLE = ROOT / "examples" / "mcqa" / "example.jsonl"
#: The bundled mcqa example expects B, C, I, E, E.
EXAMPLE_ANSWERS = ["B", "C", "I", "E", "E"]
