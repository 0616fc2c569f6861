"""The notebooks' static PNGs stored small (``compact_png``): 256 colours where that keeps every pixel's colour
within the tolerance, every colour kept otherwise."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageDraw

from repo_lens.plots.notebook import PALETTE_TOLERANCE, StaticPngRenderer, compact_png


def png_of(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def pixels(png: bytes, mode: str = "RGB") -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert(mode), dtype=np.int16)


def chart() -> Image.Image:
    """A chart-like picture: grid lines, markers of three colours and text, drawn at 4x and shrunk, so that
    every edge is anti-aliased (hundreds of distinct colours, mixes of a few)."""
    image = Image.new("RGB", (2400, 1200), "white")
    draw = ImageDraw.Draw(image)
    for x in range(0, 2400, 160):
        draw.line((x, 0, x, 1200), fill=(225, 225, 225), width=4)
    colours = [(0, 114, 178), (230, 159, 0), (0, 158, 115)]
    for index, (x, y) in enumerate(np.random.default_rng(0).uniform([80, 80], [2320, 1120], size=(300, 2))):
        draw.ellipse((x - 13, y - 13, x + 13, y + 13), fill=colours[index % 3])
    for row in range(6):
        draw.text((40, 60 * row + 20), "Marie Curie, a Polish-born physicist", fill=(34, 34, 34), font_size=40)
    return image.resize((600, 300), Image.Resampling.BOX)


def test_a_chart_keeps_its_colours_within_the_tolerance_in_a_smaller_file():
    picture = chart()
    original = png_of(picture)
    assert len(np.unique(np.asarray(picture).reshape(-1, 3), axis=0)) > 256
    compact = compact_png(original)
    error = np.abs(pixels(compact) - pixels(original)).max(axis=-1)
    assert np.percentile(error, 99.9) <= PALETTE_TOLERANCE
    assert len(compact) < 0.6 * len(original)


def test_a_picture_that_256_colours_cannot_draw_keeps_every_pixel():
    noise = Image.fromarray(np.random.default_rng(1).integers(0, 256, (64, 64, 3), dtype=np.uint8))
    original = png_of(noise)
    np.testing.assert_array_equal(pixels(compact_png(original)), pixels(original))


def test_a_transparent_picture_keeps_every_pixel_and_its_alpha():
    image = Image.new("RGBA", (40, 20), (255, 255, 255, 0))
    ImageDraw.Draw(image).rectangle((5, 5, 30, 15), fill=(0, 158, 115, 200))
    original = png_of(image)
    np.testing.assert_array_equal(pixels(compact_png(original), "RGBA"), pixels(original, "RGBA"))


def test_the_static_renderer_stores_the_compact_png(monkeypatch):
    import base64

    import plotly.graph_objects as go

    original = png_of(chart())
    monkeypatch.setattr("repo_lens.plots.notebook.figure_bytes", lambda *args, **kwargs: original)
    stored = base64.b64decode(StaticPngRenderer().to_mimebundle(go.Figure().to_dict())["image/png"])
    assert stored == compact_png(original) and len(stored) < len(original)
