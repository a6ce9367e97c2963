"""A comparison that cannot fail is refused: `torch.testing.assert_close` called without `rtol`
or `atol` on tensors whose values all lie below its default absolute tolerance (1e-5 for
float32, 1e-7 for float64) passes whatever the values are. Three GAN tests compared an R1
penalty of ~1e-7 that way, and a planted bug (the square as a cube) passed them (tests/MUTATION.md,
losses.gan). Installed for the whole session by tests/conftest.py; values that are exactly equal
(zeros included) stay allowed, since then the check is exact anyway."""

import functools

import torch

DEFAULT_ATOL = {torch.float64: 1e-7}  # assert_close's defaults; 1e-5 for float32 and the 16-bit floats


def _all_below(value: object, atol: float) -> bool:
    return (isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel() > 0
            and bool(torch.isfinite(value).all()) and float(value.detach().abs().max()) < atol)


def install() -> None:
    original = torch.testing.assert_close
    if getattr(original, "guarded", False):
        return

    @functools.wraps(original)
    def assert_close(actual, expected, *args, **kwargs):
        if not args and "rtol" not in kwargs and "atol" not in kwargs and isinstance(expected, torch.Tensor):
            atol = DEFAULT_ATOL.get(expected.dtype, 1e-5)
            if _all_below(actual, atol) and _all_below(expected, atol) and not torch.equal(actual, expected):
                raise AssertionError(
                    f"assert_close on values all below its default atol ({atol:g}): any such values pass; "
                    "give rtol and atol that fit their size (e.g. rtol=1e-5, atol=0)")
        return original(actual, expected, *args, **kwargs)

    assert_close.guarded = True
    torch.testing.assert_close = assert_close
