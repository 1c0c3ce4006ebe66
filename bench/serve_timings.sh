#!/bin/sh
# serve_timings.sh [MODEL] [TOKENS] — issue 40's server-side figures: starts
# `qkv serve` on a free port (--ctx $CTX, default TOKENS + 300; --threads
# $THREADS), prefills a session from GPL-3 repeated to TOKENS tokens (default
# 4096), then times with curl (time_total, seconds): one attention row of one
# head (the last query and one halfway), the grid of every layer x head for a
# query, 256 rows x 4096 keys, an edit (a zeroed head; a hidden key), the
# next-token top; and states the session's bytes. One line per figure.
# Needs curl and python3.
set -eu
model=${1:-models/gemma-3-270m-q4_k_m.gguf}
tokens=${2:-4096}
qkv=${QKV_BIN:-build/qkv}
out=$(mktemp -d)
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$out"' EXIT
"$qkv" serve -m "$model" --port 0 --ctx ${CTX:-$((tokens + 300))} ${THREADS:+--threads $THREADS} > "$out/line" 2> "$out/err" &
pid=$!
for _ in $(seq 600); do grep -q "^qkv serve: http" "$out/line" 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's/.*127\.0\.0\.1:\([0-9]*\)\/.*/\1/p' "$out/line")
base=http://127.0.0.1:$port
# the document's ids: GPL-3 tokenized by the model's own tokenizer, repeated, cut at TOKENS
"$qkv" tokenize -m "$model" -f /usr/share/common-licenses/GPL-3 --json > "$out/ids"
python3 - "$out/ids" "$tokens" > "$out/body" <<'PY'
import json, sys
ids = json.load(open(sys.argv[1]))["ids"]
n = int(sys.argv[2])
seq = (ids * (n // len(ids) + 1))[:n]
print(json.dumps({"tokens": seq}))
PY
t() { curl -s -o "$out/resp" -w '%{time_total}' "$@"; }
echo "load: $(cat /proc/loadavg)"
echo "prefill $tokens tokens: $(t -X POST -H 'Content-Type: application/json' --data-binary @"$out/body" "$base/api/sessions") s"
python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print('session bytes:', s['bytes'], '(%.1f MiB)' % (s['bytes']/2**20), 'n_tokens', s['n_tokens'])" "$out/resp"
q=$((tokens - 1)); h=$((tokens / 2))
echo "row, last query (layer 5, head 0): $(t "$base/api/sessions/s1/attention?layer=5&head=0&query=$q") s"
echo "row, last query again: $(t "$base/api/sessions/s1/attention?layer=5&head=0&query=$q") s"
echo "row, query $h (layer 5, head 0): $(t "$base/api/sessions/s1/attention?layer=5&head=0&query=$h") s"
echo "row as f32, last query: $(t "$base/api/sessions/s1/attention?layer=5&head=0&query=$q&format=f32") s"
echo "grid, last query (every layer x head): $(t "$base/api/sessions/s1/grid?query=$q&metric=sink") s"
echo "grid, query $h: $(t "$base/api/sessions/s1/grid?query=$h&metric=entropy") s"
k1=$((tokens < 4096 ? tokens : 4096))
echo "rows: 256 x $k1 (layer 5, head 0, the last 256 queries): $(t "$base/api/sessions/s1/rows?layer=5&head=0&q0=$((tokens - 256))&q1=$tokens&k0=0&k1=$k1") s"
echo "edit: zero head (5, 0), with its row: $(t -X POST -d '{"zero_heads": [[5, 0]], "layer": 5, "head": 0}' "$base/api/sessions/s1/edit") s"
echo "edit: hide key 0: $(t -X POST -d '{"exclude": [0]}' "$base/api/sessions/s1/edit") s"
echo "next-token top 10: $(t "$base/api/sessions/s1/next") s"
