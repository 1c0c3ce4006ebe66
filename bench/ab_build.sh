# bench/ab_build.sh — sourced by tile_ab.sh and matmul_ab.sh. ab_build NAME
# REV HEADER TARGET VW [CFLAGS] builds bench/NAME.c against one kernel header
# (HEADER, under src/) twice: git revision REV's copy as SUFFIX A and the work
# tree's as SUFFIX B, each compiled for GCC target TARGET with VW floats a
# vector (the internal headers it includes come from the work tree for
# both), and links them with build/libqkv.a into /tmp/qkv-NAME/NAME.
ab_build() {
    name=$1 rev=$2 header=$3 target=$4 vw=$5 extra=${6:-}
    top=$(git rev-parse --show-toplevel)
    out=/tmp/qkv-$name
    rm -rf "$out" && mkdir -p "$out/A/$(dirname "$header")"
    git -C "$top" show "$rev:src/$header" > "$out/A/$header" || { echo "$name.sh: no $header at $rev" >&2; exit 2; }
    [ -f "$top/build/libqkv.a" ] || { echo "$name.sh: build/libqkv.a missing: run make" >&2; exit 2; }
    flags="-O3 -std=c11 -D_GNU_SOURCE $extra -I$top/include"
    for v in A B; do
        src=$([ $v = A ] && echo "$out/A" || echo "$top/src")
        printf '#pragma GCC target("%s")\n#define VW %s\n#define SUFFIX %s\n#include "%s"\n' "$target" "$vw" $v "$header" > "$out/kernel_$v.c"
        cc $flags -I"$src" -I"$top/src" -c "$out/kernel_$v.c" -o "$out/kernel_$v.o"
    done
    cc $flags -I"$top/src" "$top/bench/$name.c" "$out/kernel_A.o" "$out/kernel_B.o" "$top/build/libqkv.a" -lm -pthread \
        -o "$out/$name"
}
