"""png_read.py - an outside decoder for the PNGs qkv writes (render/png_encode.c),
with Python's standard library only: the chunks are parsed and each CRC checked
with zlib.crc32, the IDAT data inflated with zlib (which checks the Adler-32),
and the five PNG filters undone. 8-bit RGB, no interlace: what qkv writes.

As a module: read(data) -> (width, height, rgb bytes [h, w, 3]).
As a program (the C runner's tests/test_png_encode.c):
    png_read.py png FILE.png FILE.rgb   the PNG decodes to exactly FILE.rgb
    png_read.py zlib FILE.z FILE.raw    the zlib stream inflates to FILE.raw
    png_read.py crc32 FILE              prints zlib.crc32 and zlib.adler32 of FILE
each printing "ok ..." and exiting 0, or one line naming what is wrong and 1.
"""
import struct
import sys
import zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"


class PngError(ValueError):
    pass


def chunks(data):
    """[(type, payload)] of a PNG file, every CRC checked."""
    if data[:8] != SIGNATURE:
        raise PngError("no PNG signature")
    out, p = [], 8
    while p < len(data):
        if p + 12 > len(data):
            raise PngError(f"truncated chunk at byte {p}")
        n, kind = struct.unpack(">I4s", data[p:p + 8])
        payload = data[p + 8:p + 8 + n]
        if len(payload) != n or p + 12 + n > len(data):
            raise PngError(f"chunk {kind!r} at byte {p} runs past the end")
        (crc,) = struct.unpack(">I", data[p + 8 + n:p + 12 + n])
        if crc != zlib.crc32(kind + payload):
            raise PngError(f"chunk {kind!r} at byte {p}: CRC {crc:08x}, zlib.crc32 says {zlib.crc32(kind + payload):08x}")
        out.append((kind, payload))
        p += 12 + n
        if kind == b"IEND":
            break
    if p != len(data):
        raise PngError(f"{len(data) - p} bytes after IEND")
    return out


def paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c


def unfilter(raw, w, h, bpp=3):
    """The image bytes [h, w * bpp] from the filtered rows (PNG spec §9)."""
    stride = w * bpp
    if len(raw) != h * (stride + 1):
        raise PngError(f"{len(raw)} inflated bytes, want {h} rows of 1 + {stride}")
    out = bytearray(h * stride)
    prev = bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        row = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f > 4:
            raise PngError(f"row {y}: filter type {f}")
        for i in range(stride):
            a = row[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            pred = (0, a, b, (a + b) // 2, paeth(a, b, c))[f]
            row[i] = (row[i] + pred) & 0xFF
        out[y * stride:(y + 1) * stride] = row
        prev = row
    return bytes(out)


def read(data):
    """(width, height, rgb) of a PNG file's bytes; PngError if anything is off."""
    cs = chunks(data)
    if not cs or cs[0][0] != b"IHDR" or cs[-1][0] != b"IEND":
        raise PngError("chunks do not run IHDR ... IEND")
    w, h, depth, colour, comp, filt, interlace = struct.unpack(">IIBBBBB", cs[0][1])
    if (depth, colour, comp, filt, interlace) != (8, 2, 0, 0, 0):
        raise PngError(f"not 8-bit RGB without interlace: {depth, colour, comp, filt, interlace}")
    idat = b"".join(p for k, p in cs if k == b"IDAT")
    d = zlib.decompressobj()
    raw = d.decompress(idat) + d.flush()
    if not d.eof or d.unused_data:
        raise PngError("the zlib stream is not exactly the IDAT data")
    return w, h, unfilter(raw, w, h)


def main(argv):
    try:
        if argv[:1] == ["png"] and len(argv) == 3:
            w, h, rgb = read(open(argv[1], "rb").read())
            want = open(argv[2], "rb").read()
            if rgb != want:
                bad = next((i for i in range(min(len(rgb), len(want))) if rgb[i] != want[i]), min(len(rgb), len(want)))
                raise PngError(f"{w} x {h}: pixels differ from byte {bad} on ({len(rgb)} decoded, {len(want)} wanted)")
            print(f"ok {w} x {h}")
        elif argv[:1] == ["zlib"] and len(argv) == 3:
            got = zlib.decompress(open(argv[1], "rb").read())
            if got != open(argv[2], "rb").read():
                raise PngError("inflated bytes differ")
            print(f"ok {len(got)} bytes")
        elif argv[:1] == ["crc32"] and len(argv) == 2:
            data = open(argv[1], "rb").read()
            print(f"ok {zlib.crc32(data):08x} {zlib.adler32(data):08x}")
        else:
            print("usage: png_read.py png FILE.png FILE.rgb | zlib FILE.z FILE.raw | crc32 FILE")
            return 2
    except (OSError, PngError, zlib.error, struct.error) as e:
        print(f"{type(e).__name__}: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
