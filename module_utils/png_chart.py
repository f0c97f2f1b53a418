"""A small grouped bar chart written straight to PNG (standard library only: zlib and struct).

The GPU host and the controller need no plotting library for the report's chart. ``bar_chart``
returns the PNG bytes and the geometry of every bar it drew, so tests can check the pixels.
Text uses a built-in 5x7 bitmap font (upper case, digits and a little punctuation).
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Optional

RGB = tuple[int, int, int]

WHITE: RGB = (255, 255, 255)
BLACK: RGB = (0, 0, 0)
GREY: RGB = (200, 200, 200)
PALETTE: tuple[RGB, ...] = ((31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (140, 86, 75))

# 5x7 glyphs, one string of 35 bits per character (rows top to bottom, '1' = ink).
_GLYPHS = {
    "0": "01110100011001110101110011000101110",
    "1": "00100011000010000100001000010001110",
    "2": "01110100010000100010001000100011111",
    "3": "11111000100010000010000011000101110",
    "4": "00010001100101010010111110001000010",
    "5": "11111100001111000001000011000101110",
    "6": "00110010001000011110100011000101110",
    "7": "11111000010001000100010000100001000",
    "8": "01110100011000101110100011000101110",
    "9": "01110100011000101111000010001001100",
    "A": "01110100011000111111100011000110001",
    "B": "11110100011000111110100011000111110",
    "C": "01110100011000010000100001000101110",
    "D": "11100100101000110001100011001011100",
    "E": "11111100001000011110100001000011111",
    "F": "11111100001000011110100001000010000",
    "G": "01110100011000010111100011000101111",
    "H": "10001100011000111111100011000110001",
    "I": "01110001000010000100001000010001110",
    "J": "00111000100001000010000101001001100",
    "K": "10001100101010011000101001001010001",
    "L": "10000100001000010000100001000011111",
    "M": "10001110111010110101100011000110001",
    "N": "10001100011100110101100111000110001",
    "O": "01110100011000110001100011000101110",
    "P": "11110100011000111110100001000010000",
    "Q": "01110100011000110001101011001001101",
    "R": "11110100011000111110101001001010001",
    "S": "01111100001000001110000010000111110",
    "T": "11111001000010000100001000010000100",
    "U": "10001100011000110001100011000101110",
    "V": "10001100011000110001100010101000100",
    "W": "10001100011000110101101011010101010",
    "X": "10001100010101000100010101000110001",
    "Y": "10001100011000101010001000010000100",
    "Z": "11111000010001000100010001000011111",
    " ": "00000000000000000000000000000000000",
    ".": "00000000000000000000000000110001100",
    ",": "00000000000000000000011000010001000",
    "-": "00000000000000011111000000000000000",
    "_": "00000000000000000000000000000011111",
    ":": "00000011000110000000011000110000000",
    "/": "00000000010001000100010001000000000",
    "=": "00000000001111100000111110000000000",
    "%": "11000110010001000100010001001100011",
    "(": "00010001000100001000010000010000010",
    ")": "01000001000001000010000100010001000",
    "+": "00000001000010011111001000010000000",
    "<": "00010001000100010000010000010000010",
    ">": "01000001000001000001000100010001000",
    "'": "00100001000100000000000000000000000",
    "?": "01110100010000100010001000000000100",
}
GLYPH_W, GLYPH_H = 5, 7


@dataclass(frozen=True)
class Bar:
    panel: int
    group: str
    series: str
    value: float
    x0: int
    y0: int
    x1: int
    y1: int
    color: RGB


class Canvas:
    def __init__(self, width: int, height: int, background: RGB = WHITE) -> None:
        self.width, self.height = width, height
        self.pixels = bytearray(bytes(background) * (width * height))

    def rect(self, x0: int, y0: int, x1: int, y1: int, color: RGB) -> None:
        """Fill [x0, x1) x [y0, y1), clipped to the canvas."""
        x0, x1 = max(0, min(x0, x1)), min(self.width, max(x0, x1))
        y0, y1 = max(0, min(y0, y1)), min(self.height, max(y0, y1))
        row = bytes(color) * (x1 - x0)
        for y in range(y0, y1):
            start = (y * self.width + x0) * 3
            self.pixels[start : start + len(row)] = row

    def pixel(self, x: int, y: int) -> RGB:
        i = (y * self.width + x) * 3
        return (self.pixels[i], self.pixels[i + 1], self.pixels[i + 2])

    def text(self, x: int, y: int, text: str, color: RGB = BLACK, scale: int = 1) -> int:
        """Draw text with its top-left corner at (x, y); returns the width drawn."""
        cursor = x
        for char in text.upper():
            bits = _GLYPHS.get(char, _GLYPHS["?"])
            for i, bit in enumerate(bits):
                if bit == "1":
                    px, py = cursor + (i % GLYPH_W) * scale, y + (i // GLYPH_W) * scale
                    self.rect(px, py, px + scale, py + scale, color)
            cursor += (GLYPH_W + 1) * scale
        return cursor - x

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + bytes(self.pixels[y * self.width * 3 : (y + 1) * self.width * 3]) for y in range(self.height))

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def text_width(text: str, scale: int = 1) -> int:
    return len(text) * (GLYPH_W + 1) * scale


def _nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^k that is >= value (the axis top)."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 2.5, 5, 10) if step * power >= value * (1 - 1e-12))


def bar_chart(
    title: str,
    groups: Sequence[str],
    series: Sequence[str],
    panels: Sequence[tuple[str, Mapping[tuple[str, str], Optional[float]]]],
    width: int = 960,
    panel_height: int = 260,
) -> tuple[bytes, list[Bar]]:
    """Grouped bars: one panel per (title, {(group, series): value}); a missing value draws no bar."""
    margin_l, margin_r, top, legend_h, label_h = 70, 20, 36, 22, 30
    height = top + legend_h + len(panels) * (panel_height + label_h) + 10
    c = Canvas(width, height)
    c.text(margin_l, 10, title, BLACK, 2)
    colors = {s: PALETTE[i % len(PALETTE)] for i, s in enumerate(series)}
    lx = margin_l
    for s in series:
        c.rect(lx, top, lx + 12, top + 12, colors[s])
        lx += 18 + c.text(lx + 16, top + 3, s) + 14
    bars: list[Bar] = []
    plot_w = width - margin_l - margin_r
    for p, (panel_title, values) in enumerate(panels):
        py0 = top + legend_h + p * (panel_height + label_h)
        plot_top, plot_bottom = py0 + 16, py0 + panel_height
        c.text(margin_l, py0 + 2, panel_title)
        present = [v for v in values.values() if v is not None]
        axis_top = _nice_ceiling(max(present) * 1.1 if present else 1.0)
        for frac in (0.0, 0.25, 0.5, 0.75, 1.0):
            gy = plot_bottom - round(frac * (plot_bottom - plot_top))
            c.rect(margin_l, gy, width - margin_r, gy + 1, GREY if frac else BLACK)
            label = f"{axis_top * frac:g}"
            c.text(margin_l - 6 - text_width(label), gy - 3, label)
        c.rect(margin_l, plot_top, margin_l + 1, plot_bottom + 1, BLACK)
        if not groups:
            c.text(margin_l + 20, (plot_top + plot_bottom) // 2, "NO BENCHMARK FIGURES YET")
            continue
        slot = plot_w // len(groups)
        bar_w = max(4, min(60, (slot - 16) // max(1, len(series))))
        for g, group in enumerate(groups):
            gx = margin_l + g * slot + (slot - bar_w * len(series)) // 2
            for s_index, s in enumerate(series):
                value = values.get((group, s))
                if value is None:
                    continue
                h = round((plot_bottom - plot_top) * value / axis_top)
                x0, x1 = gx + s_index * bar_w + 1, gx + (s_index + 1) * bar_w - 1
                c.rect(x0, plot_bottom - h, x1, plot_bottom, colors[s])
                label = f"{value:.1f}"
                if text_width(label) <= bar_w + 8:
                    c.text(x0 + (x1 - x0 - text_width(label)) // 2, plot_bottom - h - 9, label)
                bars.append(Bar(p, group, s, value, x0, plot_bottom - h, x1, plot_bottom, colors[s]))
            name = group if text_width(group) <= slot - 4 else group[: max(1, (slot - 4) // (GLYPH_W + 1))]
            c.text(margin_l + g * slot + (slot - text_width(name)) // 2, plot_bottom + 6, name)
    return c.png(), bars


def read_png(data: bytes) -> tuple[int, int, bytes]:
    """Decode an 8-bit RGB PNG with filter 0 rows (what Canvas writes): width, height, pixels."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if zlib.crc32(kind + body) & 0xFFFFFFFF != struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])[0]:
            raise ValueError(f"bad CRC in {kind!r} chunk")
        if kind == b"IHDR":
            width, height, depth, color_type = struct.unpack(">IIBB", body[:10])
            if (depth, color_type) != (8, 2):
                raise ValueError(f"expected 8-bit RGB, found depth {depth} colour type {color_type}")
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    stride = width * 3 + 1
    if any(raw[y * stride] != 0 for y in range(height)):
        raise ValueError("only filter type 0 rows are supported")
    return width, height, b"".join(raw[y * stride + 1 : (y + 1) * stride] for y in range(height))
