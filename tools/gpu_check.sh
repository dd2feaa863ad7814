#!/usr/bin/env bash
# The GPU check (README, "Checking a GPU build"): builds the pinned llama.cpp for CUDA sm_90 from
# llama-cpp-python's own sources, writes random-weight models of realistic shape
# (tools/tiny_gguf.py: a Llama-shaped ~1B target at F16 and Q4_0, a ~100M draft with its
# vocabulary) and prints in one run: the exactness probe's verdict with flash attention off and
# on, plain tok/s beside llama-bench built from the same sources, speculative tok/s for k = 4
# and auto (n-gram and self-pair drafts: random weights accept nothing else) and greedy identity
# (tools/gpu_check.py does the measuring).
#
#   bash tools/gpu_check.sh --prepare   # here, with network: sources, wheels, a tokenizer into .gpu/
#   bash tools/gpu_check.sh             # on the GPU machine: only the working tree and .gpu/ needed
#   bash tools/gpu_check.sh --cpu       # the same steps on a CPU build here, with small models
#
# The GPU machine has no network: everything it needs travels in .gpu/ (ignored by git, carried
# by the device call; about 10 MB): the llama-cpp-python sdist trimmed of its tests, models and
# docs, the pure-Python wheels skippy-tui needs beyond that machine's Python, and a tiny model
# whose only use is its SmolLM2 tokenizer. Builds and models stay in .gpu-work/<mode>/ (also
# ignored; a second run reuses them). GPU_CHECK_CMAKE_ARGS adds CMake flags (--cpu builds llama.cpp's
# defaults, llamafile's sgemm included, as a plain `pip install` would: a build whose probe
# certifies no verify batch); GPU_CHECK_BUDGET (seconds; 570 on the GPU, whose commands may run
# 10 minutes, 7200 with --cpu) is when the measuring stops starting new runs, counted from the
# script's start; PYTHON picks the interpreter.
set -euo pipefail
START=$(date +%s)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
GPU_DIR=$ROOT/.gpu
VER=0.3.36
NAME=llama_cpp_python-$VER
TARBALL=$GPU_DIR/$NAME-trimmed.tar.gz
PY=${PYTHON:-python3}
MODE=gpu
case "${1:-}" in
  --prepare) MODE=prepare ;;
  --cpu) MODE=cpu ;;
  "") ;;
  *) echo "usage: bash tools/gpu_check.sh [--prepare | --cpu]" >&2; exit 2 ;;
esac
say() { printf '== %s\n' "$*"; }

prepare() {
  mkdir -p "$GPU_DIR/wheels"
  local tmp; tmp=$(mktemp -d)
  if [ ! -f "$TARBALL" ]; then
    say "llama-cpp-python $VER sdist, trimmed"
    "$PY" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$VER" -d "$tmp"
    tar xzf "$tmp/$NAME.tar.gz" -C "$tmp"
    local src=$tmp/$NAME
    # what no build of the libraries and llama-bench reads: tests, models, docs, the web UI,
    # the sdist's own git history, and every ggml backend but the CPU's, CUDA's and RPC's
    rm -rf "$src"/{.git,.github,tests,docs,examples,docker}
    rm -rf "$src"/vendor/llama.cpp/{models,docs,media,tests,benches,examples,pocs,tools/ui,tools/server}
    rm -rf "$src"/vendor/llama.cpp/{.devops,ci,scripts,conversion,requirements,skills,grammars,prompts}
    for d in "$src"/vendor/llama.cpp/ggml/src/ggml-*/; do
      case $(basename "$d") in ggml-cpu|ggml-cuda|ggml-rpc) ;; *) rm -rf "$d" ;; esac
    done
    tar czf "$TARBALL" -C "$tmp" "$NAME"
  fi
  say "wheels the GPU machine's Python lacks (pure Python, the versions installed here)"
  rm -f "$GPU_DIR"/wheels/*.whl
  for pkg in diskcache platformdirs tomli; do
    local v; v=$("$PY" -c "import importlib.metadata as m; print(m.version('$pkg'))")
    # pure-Python wheels only: that machine's Python (3.12) is not necessarily this one
    "$PY" -m pip download -q --no-deps --only-binary=:all: --implementation py --abi none --platform any \
      --python-version 3.12 "$pkg==$v" -d "$GPU_DIR/wheels"
  done
  [ -f "$GPU_DIR/vocab.gguf" ] || "$PY" "$ROOT/tools/tiny_gguf.py" --arch llama --type q4_0 "$GPU_DIR/vocab.gguf"
  rm -rf "$tmp"
  say ".gpu/ is $(du -sh "$GPU_DIR" | cut -f1): carry it (the device call's carry: [\".gpu\"])"
}

if [ "$MODE" = prepare ]; then prepare; exit 0; fi
for need in "$TARBALL" "$GPU_DIR/vocab.gguf"; do
  [ -e "$need" ] || { echo "gpu_check: $need is missing: run 'bash tools/gpu_check.sh --prepare' first" >&2; exit 1; }
done

# not under .gpu/: a device call that carries .gpu/ replaces it there, and a build kept in
# .gpu-work/ on a still-warm machine is reused by the next call
WORK=${GPU_CHECK_WORK:-$ROOT/.gpu-work/$MODE}
SRC=$WORK/$NAME
BUILD=$WORK/build
PKG=$WORK/py
mkdir -p "$WORK"
[ -d "$SRC" ] || tar xzf "$TARBALL" -C "$WORK"

# the Python side: llama-cpp-python's own package (its libraries come from the build below),
# the gguf package of the same llama.cpp, and the carried wheels
if [ ! -d "$PKG/gguf" ]; then
  mkdir -p "$PKG"
  cp -r "$SRC/llama_cpp" "$PKG/llama_cpp"
  cp -r "$SRC/vendor/llama.cpp/gguf-py/gguf" "$PKG/gguf"
fi
if [ -d "$GPU_DIR/wheels" ] && [ ! -d "$WORK/site" ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" "$GPU_DIR"/wheels/*.whl
fi
export PYTHONPATH=$PKG:$WORK/site:$ROOT${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1

# the models, written while llama.cpp builds (one core each; the build takes the rest)
MODELS=$WORK/models
mkdir -p "$MODELS"
if [ "$MODE" = gpu ]; then
  TARGET_SHAPE=(--layers 16 --embd 2048 --ff 8192 --heads 32 --kv-heads 8)   # ~1B
  DRAFT_SHAPE=(--layers 6 --embd 768 --ff 3072 --heads 12 --kv-heads 4)      # ~100M
else
  TARGET_SHAPE=(--layers 4 --embd 256 --ff 1024 --heads 8 --kv-heads 2)
  DRAFT_SHAPE=(--layers 2 --embd 128 --ff 512 --heads 4 --kv-heads 2)
fi
make_model() {  # name, type, shape...
  local out=$MODELS/$1.gguf type=$2; shift 2
  [ -f "$out" ] || "$PY" "$ROOT/tools/tiny_gguf.py" --arch llama "$@" --type "$type" \
    --tokenizer-from "$GPU_DIR/vocab.gguf" "$out" >/dev/null
}
t0=$(date +%s)
(make_model target-f16 f16 "${TARGET_SHAPE[@]}" && make_model target-q4_0 q4_0 "${TARGET_SHAPE[@]}" \
  && make_model draft-f16 f16 "${DRAFT_SHAPE[@]}") >"$WORK/models.log" 2>&1 &
MODELS_PID=$!

CMAKE_FLAGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
  -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON)
[ "$MODE" = gpu ] && CMAKE_FLAGS+=(-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90)
# shellcheck disable=SC2206  # extra flags split on spaces, as CMAKE_ARGS is
CMAKE_FLAGS+=(${GPU_CHECK_CMAKE_ARGS:-})
STAMP="${CMAKE_FLAGS[*]}"
if [ -x "$BUILD/bin/llama-bench" ] && [ "$(cat "$BUILD/.gpu_check_flags" 2>/dev/null)" = "$STAMP" ]; then
  say "build: reused ($BUILD; flags ${CMAKE_FLAGS[*]})"
else
  say "build: llama.cpp $VER (${CMAKE_FLAGS[*]}), $(nproc) jobs"
  b0=$(date +%s)
  if ! { cmake -S "$SRC/vendor/llama.cpp" -B "$BUILD" "${CMAKE_FLAGS[@]}" \
         && cmake --build "$BUILD" -j"$(nproc)" --target llama llama-bench; } >"$WORK/build.log" 2>&1; then
    echo "gpu_check: the build failed (last lines of $WORK/build.log):" >&2
    tail -n 25 "$WORK/build.log" >&2
    kill "$MODELS_PID" 2>/dev/null || true
    exit 1
  fi
  echo "$STAMP" >"$BUILD/.gpu_check_flags"
  say "build: $(($(date +%s) - b0)) s"
fi
rm -rf "$PKG/llama_cpp/lib" && mkdir -p "$PKG/llama_cpp/lib"
cp -a "$BUILD"/bin/*.so* "$PKG/llama_cpp/lib/"

if ! wait "$MODELS_PID"; then
  echo "gpu_check: writing the models failed:" >&2
  tail -n 15 "$WORK/models.log" >&2
  exit 1
fi
say "models: $(($(date +%s) - t0)) s since the build began (written beside it)"

# on the GPU machine one command may run 10 minutes; here the build alone may take longer
BUDGET=${GPU_CHECK_BUDGET:-$([ "$MODE" = gpu ] && echo 570 || echo 7200)}
exec "$PY" "$ROOT/tools/gpu_check.py" --mode "$MODE" --work "$WORK" --llama-bench "$BUILD/bin/llama-bench" \
  --deadline $((START + BUDGET))
