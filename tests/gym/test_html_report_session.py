"""The session writes the HTML report at the end of every run: into the run folder, and at --gym-html."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.realgym import RealGym, attach

pytestmark = pytest.mark.gym


def _page_data(path: Path) -> dict[str, object]:
    text = path.read_text(encoding="utf-8")
    start = text.index('<script type="application/json"')
    body = text[text.index(">", start) + 1 : text.index("</script>", start)]
    data: dict[str, object] = json.loads(body)
    return data


@pytest.mark.parametrize("xdist", [(), ("-n", "2")])
def test_every_run_leaves_report_html_in_its_run_folder_and_at_gym_html(
    pytester: pytest.Pytester, example: Path, gym: RealGym, xdist: tuple[str, ...]
) -> None:
    result = pytester.runpytest(
        *attach(gym, "--gym-repeats", "2", "--gym-run-dir=run", "--gym-html=out/page.html"), *xdist
    )
    result.assert_outcomes(passed=4, failed=6)
    in_run_folder = pytester.path / "run" / "report.html"
    copied = pytester.path / "out" / "page.html"
    assert in_run_folder.is_file()
    assert copied.read_bytes() == in_run_folder.read_bytes()
    assert '"trials"' in in_run_folder.read_text(encoding="utf-8")
    assert _page_data(in_run_folder)


def test_python_m_pytest_gym_report_rebuilds_the_page_from_a_run_folder(
    pytester: pytest.Pytester, example: Path, gym: RealGym
) -> None:
    pytester.runpytest(*attach(gym, "--gym-run-dir=run")).assert_outcomes(passed=2, failed=3)
    (pytester.path / "run" / "report.html").unlink()
    result = pytester.run(
        __import__("sys").executable, "-m", "pytest_gym", "report", str(pytester.path / "run"), "-o", "again.html"
    )
    assert result.ret == 0, result.stderr.str()
    assert (pytester.path / "again.html").stat().st_size > 10_000
