"""``python -m pytest_gym``'s arguments: a wait is bounded by a finite number of seconds, a pull request is named by
ASCII digits; anything else is argparse's usage error (exit 2), naming the value."""

from __future__ import annotations

import pytest

from pytest_gym.__main__ import parser


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400", "-1", "0", "soon", "\u0663"])
def test_a_comment_timeout_that_bounds_no_wait_is_a_usage_error(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parser().parse_args(["comment", "RUN", f"--timeout={value}"])
    assert exited.value.code == 2
    assert "is not a number of seconds such as 30" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "\u0663"])
def test_a_stop_kept_grace_that_bounds_no_wait_is_a_usage_error(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parser().parse_args(["stop-kept", "POOL", f"--grace={value}"])
    assert exited.value.code == 2
    assert "is not a number of seconds such as 30" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["\u0663", "0", "-4", "9" * 5000, "4.0"])
def test_a_pull_request_number_in_other_digits_or_out_of_range_is_a_usage_error(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``int`` reads "٣" as 3 (another pull request) and refuses more than 4300 digits with a ValueError."""
    with pytest.raises(SystemExit) as exited:
        parser().parse_args(["comment", "RUN", f"--pr={value}"])
    assert exited.value.code == 2
    assert "is not a positive whole number such as 42" in capsys.readouterr().err


def test_finite_seconds_and_a_pull_request_number_are_taken() -> None:
    args = parser().parse_args(["comment", "RUN", "--timeout", "2.5", "--pr", "42"])
    assert (args.timeout, args.pr) == (2.5, 42)
    assert parser().parse_args(["stop-kept", "POOL", "--grace", "0"]).grace == 0.0
