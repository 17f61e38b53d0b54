"""The HTML report's charts as a browser draws them: headless Chromium renders ``diagnose --html``
of each bundled example, and the screenshot's pixels are inspected where the charts are.

Markup can be right and still draw nothing (a zero width, a colour lost, a viewBox that clips),
so the test reads the rendered page: the bound chart's two rows (the floor in blue, then the
observed step as blue up to the floor and red beyond it) and the budget waterfall's orange
bars, each starting where the one above ended. It skips, saying so, only when no Chromium
binary is installed (``.ci/run`` installs one where apt exists).
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, run_cli

from diagnoser.report.svg import COLOURS

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
EXAMPLES = sorted((REPO / "examples").glob("case-*.yaml"))
WINDOW = (1000, 1300)


def browser() -> str:
    found = next((path for name in BROWSERS if (path := shutil.which(name))), None)
    if found is None:
        pytest.skip(f"no Chromium binary on PATH (looked for {', '.join(BROWSERS)}); apt-get install chromium to run this test")
    return found


def decode_png(data: bytes) -> np.ndarray:
    """A non-interlaced 8-bit RGB(A) PNG as an (height, width, 3) array: what Chromium's screenshots are."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = header
    assert depth == 8 and colour in (2, 6) and interlace == 0, header
    bpp = 3 if colour == 2 else 4
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(height, 1 + width * bpp)
    out = np.zeros((height, width * bpp), dtype=np.uint8)
    prev = np.zeros(width * bpp, dtype=np.int32)
    for y in range(height):
        kind, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        if kind == 0:
            row = line
        elif kind == 2:
            row = (line + prev) & 0xFF
        else:  # Sub, Average, Paeth depend on the pixel to the left: byte by byte
            row = np.zeros_like(line)
            for x in range(len(line)):
                left = row[x - bpp] if x >= bpp else 0
                up, corner = prev[x], (prev[x - bpp] if x >= bpp else 0)
                if kind == 1:
                    pred = left
                elif kind == 3:
                    pred = (left + up) >> 1
                else:
                    p = left + up - corner
                    pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                    pred = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                row[x] = (line[x] + pred) & 0xFF
        out[y], prev = row, row
    return out.reshape(height, width, bpp)[:, :, :3]


def mask(image: np.ndarray, kind: str) -> np.ndarray:
    rgb = np.array([int(COLOURS[kind][i:i + 2], 16) for i in (1, 3, 5)])
    return (np.abs(image.astype(int) - rgb).sum(axis=2) <= 12)


def bands(rows: np.ndarray) -> list[tuple[int, int]]:
    """Runs of consecutive True rows as (first, last)."""
    out, start = [], None
    for y, on in enumerate(list(rows) + [False]):
        if on and start is None:
            start = y
        elif not on and start is not None:
            out.append((start, y - 1))
            start = None
    return out


def screenshot(html: Path, tmp_path: Path) -> np.ndarray:
    png = tmp_path / (html.stem + ".png")
    subprocess.run(
        [browser(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--window-size={WINDOW[0]},{WINDOW[1]}",
         f"--screenshot={png}", html.as_uri()],
        capture_output=True, timeout=120, check=True,
    )
    return decode_png(png.read_bytes())


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_the_charts_are_drawn_in_a_browser(example, tmp_path):
    browser()
    page = tmp_path / f"{example.stem}.html"
    assert run_cli("diagnose", str(example), "--html", "-o", str(page)).returncode == 0
    markup = page.read_text()
    assert "<script" not in markup and "http" not in markup  # one file: nothing to fetch, nothing to run
    image = screenshot(page, tmp_path)
    blue, red = mask(image, "floor"), mask(image, "unexplained")

    # The bound chart comes first: its first blue band is the floor, the next holds the observed step,
    # blue up to where the floor ended and red after it.
    floor, observed = bands(blue.any(axis=1))[:2]
    floor_end = np.nonzero(blue[floor[0]:floor[1] + 1].any(axis=0))[0].max()
    observed_blue = np.nonzero(blue[observed[0]:observed[1] + 1].any(axis=0))[0]
    observed_red = np.nonzero(red[observed[0]:observed[1] + 1].any(axis=0))[0]
    assert abs(observed_blue.max() - floor_end) <= 2
    assert len(observed_red) > 20 and observed_red.min() >= floor_end

    if 'id="chart-budget"' in markup:
        # The waterfall: orange bars on rows of their own, each starting where the one above ended.
        orange = mask(image, "part")
        starts = [np.nonzero(orange[a:b + 1].any(axis=0))[0] for a, b in bands(orange.any(axis=1))]
        assert len(starts) >= 2
        assert all(later.min() >= earlier.max() - 2 for earlier, later in zip(starts, starts[1:]))


def test_the_moe_example_draws_the_bound_and_the_waterfall():
    """The acceptance's example: both charts the issue asks for are in the page the test above renders."""
    markup = run_cli("diagnose", str(REPO / "examples" / "case-moe-small-experts.yaml"), "--html").stdout
    assert 'id="chart-bound"' in markup and 'id="chart-budget"' in markup
