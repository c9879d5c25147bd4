"""What the oldest-setup leg of scripts/test.sh leaves out: the ``-n 2`` twins (``xdist_twin``, set in conftest.py)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("xdist", [(), ("-n", "2"), ("-p", "no:xdist"), ["-n", "2", "--dist", "load"]])
def test_only_the_n_2_case_of_a_test_is_its_xdist_twin(request: pytest.FixtureRequest, xdist: tuple[str, ...]) -> None:
    assert (request.node.get_closest_marker("xdist_twin") is not None) == ("-n" in xdist)


@pytest.mark.parametrize("label", ["-n", "n2"])
def test_a_parameter_that_is_not_a_list_of_arguments_is_no_twin(request: pytest.FixtureRequest, label: str) -> None:
    assert request.node.get_closest_marker("xdist_twin") is None
