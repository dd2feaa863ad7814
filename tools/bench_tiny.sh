#!/usr/bin/env bash
# `skippy-tui bench` on tiny random-weight models (tools/tiny_gguf.py): a hybrid target whose
# rejected rows leave by llama.cpp's snapshots, and a recurrent one that restores a saved state.
#
#   qwen35  --echo 0.94 --mtp 1 (hybrid, rollback "snapshot"), drafted three ways in one bench:
#           its own file as the draft model (a self-pair: every proposal accepted), its MTP head
#           (sometimes right; the mtp columns) and the n-gram on the suite's copy prompts
#   mamba   --echo 0.94 (recurrent, rollback "restore"), drafted by a mamba --echo 0.94 of
#           another seed (its proposals partly rejected: restores happen) and the n-gram
#
# Each bench runs greedy (T=0) and sampled (T=0.8, seed 1) and saves its JSON report as
# OUT/bench-tiny-<model>-T<temp>-<date>.json; the text report goes to stdout.
#
#   usage: tools/bench_tiny.sh [--smoke]     (run from the venv that has skippy-tui, or set PY)
#     --smoke      prove it runs: 1 repeat, two prompts, 16 tokens, k 2,4, no warm-up
#                  (the figures mean nothing on a busy machine; OUT defaults to a temp dir)
#   env: OUT (default docs/results, or a temp dir with --smoke), MODELS (default .cache/bench-tiny),
#        PY (default python), REPEATS, MAX_TOKENS, PROMPTS, KS (bench flags; the full run's
#        defaults: 5 repeats, 128 tokens, the whole suite, k 1,2,4,8), CONFIG (a config file for
#        --config, e.g. [target] threads; default: your own config, as every command reads it)
# The real measurement wants a quiet machine: nothing else running, and the same config in
# every run that is compared (the report's meta says the threads and the load average).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-python}
SMOKE=0
case "${1:-}" in
  --smoke) SMOKE=1 ;;
  "") ;;
  *) echo "usage: tools/bench_tiny.sh [--smoke]" >&2; exit 2 ;;
esac
MODELS=${MODELS:-$ROOT/.cache/bench-tiny}
if [ "$SMOKE" = 1 ]; then
  OUT=${OUT:-$(mktemp -d)}
  REPEATS=${REPEATS:-1} MAX_TOKENS=${MAX_TOKENS:-16} PROMPTS=${PROMPTS:-rewrite-replace,chat} KS=${KS:-2,4}
  EXTRA=(--no-warmup)
else
  OUT=${OUT:-$ROOT/docs/results}
  REPEATS=${REPEATS:-5} MAX_TOKENS=${MAX_TOKENS:-128} PROMPTS=${PROMPTS:-} KS=${KS:-1,2,4,8}
  EXTRA=()
fi
mkdir -p "$MODELS" "$OUT"
DATE=$(date +%Y-%m-%d)

# the tiny models, written once (same options, same bytes: tiny_gguf.py is deterministic)
tiny() {  # tiny NAME ARGS...: prints MODELS/NAME.gguf, written first if missing
  local dest=$MODELS/$1.gguf
  shift
  if [ ! -s "$dest" ]; then
    "$PY" "$ROOT/tools/tiny_gguf.py" "$@" "$dest.tmp" >&2
    mv -f "$dest.tmp" "$dest"  # a whole file or none: an interrupted write is not taken next time
  fi
  echo "$dest"
}
QWEN=$(tiny qwen35-mtp-echo --arch qwen35 --mtp 1 --echo 0.94)
MAMBA=$(tiny mamba-echo --arch mamba --echo 0.94)
MAMBA_DRAFT=$(tiny mamba-echo-seed1 --arch mamba --echo 0.94 --seed 1)

bench() {  # bench NAME TEMP ARGS...: one bench, its JSON saved under OUT
  local name=$1 temp=$2
  shift 2
  local save=$OUT/bench-tiny-$name-T$temp-$DATE.json
  local flags=(--repeats "$REPEATS" --max-tokens "$MAX_TOKENS" --k "$KS" --temperature "$temp" --seed 1)
  if [ -n "$PROMPTS" ]; then flags+=(--prompts "$PROMPTS"); fi
  if [ -n "${CONFIG:-}" ]; then flags+=(--config "$CONFIG"); fi
  echo "== $name, T=$temp -> $save" >&2
  (cd "$ROOT" && "$PY" -m skippy_tui bench "$@" "${flags[@]}" "${EXTRA[@]}" --no-progress --save "$save")
}

for temp in 0 0.8; do
  bench qwen35-mtp-echo "$temp" --target "$QWEN" --draft "$QWEN"
  bench mamba-echo "$temp" --target "$MAMBA" --draft "$MAMBA_DRAFT"
done
echo "reports: $OUT" >&2
