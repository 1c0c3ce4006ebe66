"""The Python extension fuses a*b+c in the same files as the Makefile.

setup.py compiles libqkv's sources itself; a kernel file the Makefile builds
with -ffp-contract=fast but setup.py does not rounds differently, and the
tests that compare Python with the CLI byte for byte would fail far from the
cause. Both lists are read from their files here.
"""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def makefile_fused_prefixes():
    text = (ROOT / "Makefile").read_text()
    return sorted(m.group(1) for m in re.finditer(r"^\$\(BUILD\)/(src/\S+?)%\.o: ALL_CFLAGS \+= -ffp-contract=fast$",
                                                  text, re.M))


def setup_fused_prefixes():
    text = (ROOT / "setup.py").read_text()
    m = re.search(r"^FMA_PATTERNS = \(([^)]*)\)", text, re.M)
    assert m, "setup.py has no FMA_PATTERNS"
    return sorted(re.findall(r'"([^"]+)"', m.group(1)))


def test_setup_fuses_the_makefiles_files():
    make = makefile_fused_prefixes()
    assert make, "no -ffp-contract=fast rule found in the Makefile"
    assert setup_fused_prefixes() == make


def test_every_fused_prefix_names_sources():
    for prefix in setup_fused_prefixes():
        assert list(ROOT.glob(prefix + "*.c")), prefix
