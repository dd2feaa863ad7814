#!/usr/bin/env bash
# Builds llama.cpp's RPC server (ggml-rpc-server) from the llama.cpp that the installed
# llama-cpp-python vendors -- client and server must speak the same RPC protocol -- with the
# same CPU flag as the README's install (-DGGML_LLAMAFILE=OFF), and prints the binary's path.
# Cached: a second run prints the path at once. Run in the project's venv.
#   usage: tools/build-rpc-server.sh [OUT_DIR]     (default .cache/rpc-server/<version>; ~3 min on 2 cores)
# The sources come from $SKIPPY_LLAMA_SRC, else the sdist of the same version (pip download).
set -euo pipefail
VER=$(python -c 'import importlib.metadata as m;print(m.version("llama-cpp-python"))')
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/.cache/rpc-server/$VER}
BIN=$OUT/build/bin/ggml-rpc-server
if [ -x "$BIN" ]; then echo "$BIN"; exit 0; fi
mkdir -p "$OUT"
SRC=${SKIPPY_LLAMA_SRC:-}
if [ -z "$SRC" ]; then
  SRC=$OUT/llama_cpp_python-$VER/vendor/llama.cpp
  if [ ! -f "$SRC/CMakeLists.txt" ]; then
    if ! pip download -q --no-deps --disable-pip-version-check --no-binary :all: \
         "llama-cpp-python==$VER" -d "$OUT" >"$OUT/download.log" 2>&1; then
      echo "build-rpc-server: could not download the llama-cpp-python $VER sdist (see $OUT/download.log)" >&2
      exit 1
    fi
    tar xzf "$OUT/llama_cpp_python-$VER.tar.gz" -C "$OUT"
  fi
fi
if ! { cmake -S "$SRC" -B "$OUT/build" -DGGML_RPC=ON -DGGML_LLAMAFILE=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
         -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release \
         -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON \
       && cmake --build "$OUT/build" -j"$(nproc)" --target ggml-rpc-server; } >"$OUT/build.log" 2>&1; then
  echo "build-rpc-server: the build failed (last lines of $OUT/build.log):" >&2
  tail -n 15 "$OUT/build.log" >&2
  exit 1
fi
echo "$BIN"
