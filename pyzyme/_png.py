"""A small plot as a PNG file, written with zlib and struct: dots and lines on a white canvas
with a frame, enough for ``pyzyme demo`` without a plotting library.

Examples
--------
>>> import os, tempfile
>>> c = Canvas(40, 20, (0.0, 1.0), (0.0, 1.0))
>>> c.line([0.0, 1.0], [0.0, 1.0], RED)
>>> path = os.path.join(tempfile.mkdtemp(), "x.png")
>>> c.save(path)
>>> width, height, pixels = read(path)
>>> (width, height), pixels[20 - 1 - 3][3] == RED   # (0, 0) is the frame's lower left corner
((40, 20), True)
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

__all__ = ["Canvas", "read", "RED", "BLUE", "GREY", "BLACK", "WHITE"]

RED, BLUE, GREY = (214, 39, 40), (31, 119, 180), (150, 150, 150)
BLACK, WHITE = (0, 0, 0), (255, 255, 255)


class Canvas:
    """``width`` x ``height`` pixels showing ``xrange`` x ``yrange``, inside a margin of
    ``margin`` pixels with a black frame."""

    def __init__(self, width: int, height: int, xrange: tuple[float, float],
                 yrange: tuple[float, float], margin: int = 3) -> None:
        self.width, self.height, self.margin = width, height, margin
        self.xrange, self.yrange = xrange, yrange
        self.rows = [[WHITE] * width for _ in range(height)]
        last_x, last_y = width - 1 - margin + 1, height - 1 - margin + 1
        for x in range(margin - 1, last_x + 1):
            self.rows[margin - 1][x] = self.rows[last_y][x] = BLACK
        for y in range(margin - 1, last_y + 1):
            self.rows[y][margin - 1] = self.rows[y][last_x] = BLACK

    def pixel(self, x: float, y: float) -> tuple[int, int]:
        """The column and row of the point ``(x, y)``."""
        (x0, x1), (y0, y1), m = self.xrange, self.yrange, self.margin
        col = m + round((x - x0) / (x1 - x0) * (self.width - 1 - 2 * m))
        row = self.height - 1 - m - round((y - y0) / (y1 - y0) * (self.height - 1 - 2 * m))
        return col, row

    def set(self, col: int, row: int, colour) -> None:
        m = self.margin
        if m <= col < self.width - m and m <= row < self.height - m:
            self.rows[row][col] = colour

    def dot(self, x: float, y: float, colour, radius: int = 1) -> None:
        """A square dot of side ``2 * radius + 1`` at ``(x, y)``."""
        col, row = self.pixel(x, y)
        for dr in range(-radius, radius + 1):
            for dc in range(-radius, radius + 1):
                self.set(col + dc, row + dr, colour)

    def line(self, xs: Sequence[float], ys: Sequence[float], colour) -> None:
        """The polyline through the points ``(xs[i], ys[i])``, two pixels thick."""
        points = [self.pixel(x, y) for x, y in zip(xs, ys)]
        for (c0, r0), (c1, r1) in zip(points, points[1:]):
            steps = max(abs(c1 - c0), abs(r1 - r0), 1)
            for k in range(steps + 1):
                col = c0 + round((c1 - c0) * k / steps)
                row = r0 + round((r1 - r0) * k / steps)
                self.set(col, row, colour)
                self.set(col, row + 1, colour)

    def save(self, path: str) -> None:
        """Write the canvas as an 8-bit RGB PNG."""
        raw = b"".join(b"\x00" + bytes(v for px in row for v in px) for row in self.rows)
        with open(path, "wb") as f:
            f.write(b"\x89PNG\r\n\x1a\n")
            f.write(_chunk(b"IHDR", struct.pack(">IIBBBBB", self.width, self.height, 8, 2,
                                                0, 0, 0)))
            f.write(_chunk(b"IDAT", zlib.compress(raw, 9)))
            f.write(_chunk(b"IEND", b""))


def _chunk(kind: bytes, data: bytes) -> bytes:
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))


def read(path: str) -> tuple[int, int, list[list[tuple[int, int, int]]]]:
    """``(width, height, rows of (r, g, b))`` of a PNG that :meth:`Canvas.save` wrote (8-bit
    RGB, no filter); checks every chunk's CRC."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path} is not a PNG file")
    pos, idat, width = 8, b"", None
    while pos < len(data):
        (size,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + size]
        (crc,) = struct.unpack(">I", data[pos + 8 + size:pos + 12 + size])
        if zlib.crc32(kind + body) & 0xFFFFFFFF != crc:
            raise ValueError(f"{path}: bad CRC in its {kind.decode()} chunk")
        if kind == b"IHDR":
            width, height, depth, colour, _, filt, _ = struct.unpack(">IIBBBBB", body)
            if (depth, colour, filt) != (8, 2, 0):
                raise ValueError(f"{path}: not an 8-bit RGB PNG")
        elif kind == b"IDAT":
            idat += body
        pos += 12 + size
    raw = zlib.decompress(idat)
    stride = 1 + 3 * width
    rows = []
    for r in range(height):
        line = raw[r * stride:(r + 1) * stride]
        if line[0] != 0:
            raise ValueError(f"{path}: row {r} uses a PNG filter; read() reads only unfiltered")
        rows.append([tuple(line[1 + 3 * c:4 + 3 * c]) for c in range(width)])
    return width, height, rows
