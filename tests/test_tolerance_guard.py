"""tests/tolerance_guard.py, which the whole suite runs under: assert_close refuses a comparison
that any values below its default atol would pass, and leaves every other comparison alone."""

import pytest
import torch


def test_values_below_the_default_atol_need_a_tolerance_that_fits_them():
    with pytest.raises(AssertionError, match=r"below its default atol \(1e-05\)"):
        torch.testing.assert_close(torch.tensor([1e-7]), torch.tensor([5e-7]))  # 5x apart, would pass
    with pytest.raises(AssertionError, match=r"below its default atol \(1e-07\)"):
        torch.testing.assert_close(torch.tensor([1e-9], dtype=torch.float64), torch.tensor([0.0], dtype=torch.float64))
    with pytest.raises(AssertionError, match="not close"):  # with a tolerance of their size they are compared
        torch.testing.assert_close(torch.tensor([1e-7]), torch.tensor([5e-7]), rtol=1e-5, atol=0)


def test_other_comparisons_are_untouched():
    torch.testing.assert_close(torch.tensor([1e-7]), torch.tensor([1e-7]))  # equal: exact anyway
    torch.testing.assert_close(torch.zeros(3), torch.zeros(3))
    torch.testing.assert_close(torch.tensor([1.0, 2e-6]), torch.tensor([1.0, 2e-6 + 1e-9]))  # not all tiny
    torch.testing.assert_close(torch.tensor([1e-7]), torch.tensor([1.1e-7]), rtol=0.2, atol=0)
    with pytest.raises(AssertionError, match="not close"):
        torch.testing.assert_close(torch.tensor([1.0]), torch.tensor([1.1]))
