"""Inspection.save_png: the figure `qkv inspect --png` writes, from the same code
(render/png.c and the library's own encoder), checked from outside with
png_read.py (chunk CRCs against zlib.crc32, IDAT inflated by zlib, filters
undone); written whole or not at all."""
import os
import pathlib
import resource
import signal
import subprocess

import pytest

import png_read
from conftest import ROOT, model_path

TEXT = "年假怎么申请？"


def cli_png(tmp_path, name, *args, env=None):
    """The PNG `qkv inspect --png` writes for TEXT with args, as bytes."""
    qkv_bin = pathlib.Path(os.environ.get("QKV_BIN", ROOT / "build" / "qkv"))
    if not qkv_bin.exists():
        pytest.skip(f"{qkv_bin} missing (make)")
    out = tmp_path / name
    subprocess.run([str(qkv_bin), "inspect", "-m", str(model_path()), "-p", TEXT, "--png", str(out), "--threads", "2",
                    *args], check=True, capture_output=True, env=env)
    return out.read_bytes()


def test_save_png_is_the_cli_png(smollm2, tmp_path):
    small = smollm2.inspect(TEXT, layers=[4, 2], heads=[1])
    assert small.png_labels  # the machine has unifont (make deps)
    p = tmp_path / "small.png"
    small.save_png(p)
    data = p.read_bytes()
    assert data == cli_png(tmp_path, "cli-small.png", "--layers", "2,4", "--heads", "1")
    w, h, rgb = png_read.read(data)  # every CRC, the zlib stream, the filters
    assert len(rgb) == w * h * 3 and w > 2 * 16 * small.n_tokens // 2 and h > w
    kinds = [k for k, _ in png_read.chunks(data)]
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and set(kinds[1:-1]) == {b"IDAT"}


def test_save_png_every_map_compresses(smollm2, tmp_path):
    """All 30 x 9 maps: the CLI's file byte for byte, and the fixed-Huffman LZ77
    stream at most a third of the raw RGB (measured: about 2%)."""
    page = smollm2.inspect(TEXT)
    p = tmp_path / "all.png"
    page.save_png(p)
    data = p.read_bytes()
    assert data == cli_png(tmp_path, "cli-all.png")
    cs = png_read.chunks(data)
    w, h = int.from_bytes(cs[0][1][:4], "big"), int.from_bytes(cs[0][1][4:8], "big")
    ratio = len(data) / (w * h * 3)
    print(f"{w} x {h} pixels: {len(data):,} bytes of PNG for {w * h * 3:,} of RGB, ratio {ratio:.4f}")
    assert ratio <= 1 / 3


def test_save_png_without_font(smollm2, tmp_path, monkeypatch):
    """No unifont.hex: no text in the figure (the CLI's picture too), and a warning."""
    monkeypatch.setenv("QKV_FONT", str(tmp_path / "no-such-font.hex"))
    bare = smollm2.inspect(TEXT, layers=[3], heads=[2])
    assert not bare.png_labels
    p = tmp_path / "bare.png"
    with pytest.warns(UserWarning, match="no labels"):
        bare.save_png(p)
    assert p.read_bytes() == cli_png(tmp_path, "cli-bare.png", "--layers", "3", "--heads", "2", env=dict(os.environ))
    w, h, rgb = png_read.read(p.read_bytes())
    assert w * h * 3 == len(rgb)


def test_save_png_bad_path_keeps_the_old_file(smollm2, tmp_path):
    page = smollm2.inspect(TEXT, layers=[0], heads=[0])
    missing = tmp_path / "no-such-dir" / "x.png"
    with pytest.raises(OSError) as e:
        page.save_png(missing)
    msg = str(e.value)
    assert msg == f"{missing}: cannot create a file there (No such file or directory)", msg
    with pytest.raises(OSError, match="not a regular file"):
        page.save_png(tmp_path)
    # a write that fails half way (the file size limit) leaves the old file and no temporary
    old = tmp_path / "old.png"
    old.write_bytes(b"the previous picture")
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, hard))
        with pytest.raises(OSError) as e:
            page.save_png(old)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)
    assert "\n" not in str(e.value) and str(old) in str(e.value) and "File too large" in str(e.value)
    assert old.read_bytes() == b"the previous picture"
    assert sorted(os.listdir(tmp_path)) == ["old.png"]
    # and the same call then replaces it
    page.save_png(old)
    assert old.read_bytes()[:8] == png_read.SIGNATURE
    assert sorted(os.listdir(tmp_path)) == ["old.png"]
    # save_html goes the same way
    with pytest.raises(OSError, match="cannot create a file there"):
        page.save_html(missing)
