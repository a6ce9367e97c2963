"""Texture fields and region layouts of the held-out scene families, written apart from
framework/data/textures.py (nothing imported from it, no shared parameter): other texture kinds
and scales, other region shapes.

A texture is `paint(yy, xx, rng) -> H x W field in [-1, 1]`, with its own random phase (and,
for some kinds, orientation) drawn per region, so a class is a kind of texture, not one exact
pattern. A layout is `layout(size, rng) -> H x W region ids 0..n-1`.
"""

import numpy as np


def smooth_noise(size, cell, rng):
    """Value noise: a random grid of `size / cell` + 3 knots, bilinearly interpolated, in [-1, 1]."""
    knots = size // cell + 3  # the last pixel, shifted by up to one cell, still has a knot on each side
    grid = rng.uniform(-1, 1, (knots, knots))
    coords = np.arange(size) / cell + rng.uniform(0, 1)
    low = np.floor(coords).astype(int)
    frac = coords - low
    fy, fx = frac[:, None], frac[None, :]
    y0, x0 = low[:, None], low[None, :]
    top = grid[y0, x0] * (1 - fx) + grid[y0, x0 + 1] * fx
    bottom = grid[y0 + 1, x0] * (1 - fx) + grid[y0 + 1, x0 + 1] * fx
    return top * (1 - fy) + bottom * fy


def _rotated(yy, xx, angle):
    return xx * np.cos(angle) + yy * np.sin(angle), -xx * np.sin(angle) + yy * np.cos(angle)


def grating(period, angles=None):
    """A sinusoid of `period` pixels; angle drawn from `angles` (None: any)."""
    def paint(yy, xx, rng):
        angle = rng.choice(angles) if angles is not None else rng.uniform(0, np.pi)
        u, _ = _rotated(yy, xx, angle)
        return np.sin(2 * np.pi * u / period + rng.uniform(0, 2 * np.pi))
    return paint


def checks(period):
    def paint(yy, xx, rng):
        u, v = _rotated(yy + rng.uniform(0, period), xx + rng.uniform(0, period), rng.uniform(0, np.pi / 2))
        return np.sign(np.sin(np.pi * u / period) * np.sin(np.pi * v / period) + 1e-9)
    return paint


def spots(period, radius):
    """Discs of `radius` on a square lattice of `period`, lattice shifted at random."""
    def paint(yy, xx, rng):
        dy = (yy + rng.uniform(0, period)) % period - period / 2
        dx = (xx + rng.uniform(0, period)) % period - period / 2
        return np.where(dy ** 2 + dx ** 2 < radius ** 2, 1.0, -1.0)
    return paint


def rings(period):
    """Concentric rings around a random centre (it may lie outside the image)."""
    def paint(yy, xx, rng):
        size = yy.shape[0]
        cy, cx = rng.uniform(-size, 2 * size, 2)
        return np.sin(2 * np.pi * np.hypot(yy - cy, xx - cx) / period)
    return paint


def clouds(cell):
    """Value noise of cell size `cell`, stretched to [-1, 1]."""
    def paint(yy, xx, rng):
        field = smooth_noise(yy.shape[0], cell, rng)
        return field / (np.abs(field).max() + 1e-6)
    return paint


def speckle(density):
    """Sparse bright pixels on a dark ground: a `density` fraction of pixels lit."""
    def paint(yy, xx, rng):
        return np.where(rng.uniform(size=yy.shape) < density, 1.0, -0.3)
    return paint


def zigzag(period, amplitude):
    def paint(yy, xx, rng):
        tri = 2 * np.abs((yy / period + rng.uniform()) % 1 - 0.5)  # triangle wave along y, 0..1
        return np.sin(2 * np.pi * (xx + amplitude * tri) / period + rng.uniform(0, 2 * np.pi))
    return paint


def bricks(height, width):
    """Mortar lines of rows `height` apart, every other row's joints shifted half a brick."""
    def paint(yy, xx, rng):
        y = yy + rng.uniform(0, height)
        row = np.floor(y / height)
        x = xx + rng.uniform(0, width) + (row % 2) * width / 2
        mortar = (y % height < 1.5) | (x % width < 1.5)
        return np.where(mortar, -1.0, 0.6)
    return paint


def flat():
    def paint(yy, xx, rng):
        return np.zeros(yy.shape)
    return paint


# ----------------------------------------------------------------------------- layouts


def voronoi(low, high):
    """`low`..`high` cells around random sites."""
    def layout(size, rng):
        sites = rng.uniform(0, size, (rng.integers(low, high + 1), 2))
        yy, xx = np.mgrid[:size, :size]
        distance = (yy[..., None] - sites[:, 0]) ** 2 + (xx[..., None] - sites[:, 1]) ** 2
        return distance.argmin(-1)
    return layout


def bands(low, high, wobble):
    """`low`..`high` parallel bands of random widths at a random angle, edges bent by a sine of
    amplitude `wobble` pixels."""
    def layout(size, rng):
        count = rng.integers(low, high + 1)
        yy, xx = np.mgrid[:size, :size].astype(float)
        u, v = _rotated(yy, xx, rng.uniform(0, np.pi))
        u = u + wobble * np.sin(2 * np.pi * v / size * rng.uniform(0.5, 2) + rng.uniform(0, 2 * np.pi))
        cuts = np.sort(rng.uniform(u.min(), u.max(), count - 1))
        return np.searchsorted(cuts, u)
    return layout


def blobs(low, high, cell):
    """A ground (region 0) with `low`..`high` blobs laid over it, each the high part of its own
    value-noise field of cell size `cell`; a later blob covers an earlier one. Ids are renumbered
    to the regions still visible."""
    def layout(size, rng):
        regions = np.zeros((size, size), dtype=int)
        for blob in range(1, rng.integers(low, high + 1) + 1):
            field = smooth_noise(size, cell, rng)
            regions[field > np.quantile(field, rng.uniform(0.6, 0.85))] = blob
        return np.unique(regions, return_inverse=True)[1].reshape(size, size)
    return layout
