"""setup.py - builds qkv._qkv, the CPython extension of the Python package.

The extension is compiled from the same sources as libqkv (src/*/*.c) plus the
bindings in python/src/*.c, with the Makefile's default (any x86-64) flags:
-std=c11, -O3, -pthread (libqkv has its own thread pool), no -march. The per-ISA kernel files carry their own
`#pragma GCC target`, and the kernel is chosen at run time from CPUID, so a
wheel runs on any x86-64. As in the Makefile, only the SIMD inner loops
(src/attn/tile_*.c, src/model/matmul_*.c, src/model/ffn_act_*.c, src/probe/overview_*.c) may fuse a*b+c (-ffp-contract=fast);
nothing is built with -ffast-math (masks rely on -INFINITY).

setuptools compiles every source of an Extension with the same flags, so
build_ext is extended by one step: the library sources are compiled first, in
two groups with their own flags, and handed to the link as extra objects.
"""
import glob
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
os.chdir(ROOT)  # setuptools wants source paths relative to setup.py

COMMON_FLAGS = ["-std=c11", "-O3", "-pthread", "-D_GNU_SOURCE", "-Wall", "-Wextra"]
FMA_PATTERNS = ("src/attn/tile_", "src/model/matmul_", "src/model/ffn_act_", "src/probe/overview_")

LIB_SOURCES = sorted(glob.glob("src/*/*.c"))
# Model.inspect's pictures: render/'s writers (the HTML page, the PNG figure
# with its own encoder: no libpng) and the page itself, embedded by the
# assembler (render/page.S, .incbin)
RENDER_SOURCES = sorted(glob.glob("render/*.c"))
PAGE_ASM, PAGE_HTML = "render/page.S", "render/inspect_page.html"
BINDING_SOURCES = sorted(glob.glob("python/src/*.c"))


def out_of_date(obj, inputs):
    """True when obj is missing or older than any of inputs."""
    if not os.path.exists(obj):
        return True
    t = os.path.getmtime(obj)
    return any(os.path.getmtime(i) > t for i in inputs)


class build_ext_libqkv(build_ext):
    """build_ext that first compiles libqkv's sources with the Makefile's per-file flags."""

    def build_extension(self, ext):
        fused = [s for s in LIB_SOURCES if s.startswith(FMA_PATTERNS)]
        plain = [s for s in LIB_SOURCES if s not in fused]
        headers = glob.glob("include/*.h") + glob.glob("include/qkv/*.h") + glob.glob("src/*/*.h") + glob.glob("render/*.h")
        objects = []
        for group, extra in ((plain + RENDER_SOURCES, []), (fused, ["-ffp-contract=fast"])):
            outputs = self.compiler.object_filenames(group, output_dir=self.build_temp)
            # an object newer than its source and every header is reused
            stale = [s for s, o in zip(group, outputs) if self.force or out_of_date(o, [s] + headers)]
            if stale:
                self.compiler.compile(stale, output_dir=self.build_temp, include_dirs=["include", "src", "render"],
                                      extra_postargs=COMMON_FLAGS + extra)
            objects += outputs
        page = os.path.join(self.build_temp, "render", "page.o")
        if self.force or out_of_date(page, [PAGE_ASM, PAGE_HTML]):
            os.makedirs(os.path.dirname(page), exist_ok=True)
            self.compiler.spawn(self.compiler.compiler_so + ["-c", PAGE_ASM, "-o", page, "-Wa,-I," + ROOT])
        objects.append(page)
        ext.extra_objects = objects + list(ext.extra_objects or [])
        super().build_extension(ext)


setup(
    ext_modules=[
        Extension(
            "qkv._qkv",
            sources=BINDING_SOURCES,
            include_dirs=["include", "render", "python/src"],
            extra_compile_args=COMMON_FLAGS,
            extra_link_args=["-pthread"],
            libraries=["m"],
            depends=glob.glob("python/src/*.h") + glob.glob("include/*.h") + glob.glob("include/qkv/*.h") + glob.glob("render/*.h"),
        )
    ],
    cmdclass={"build_ext": build_ext_libqkv},
)
