# Sourced by the CPU device scripts beside it: where things live, timing, and the three builds they share.
#   . "$(dirname "$0")/common.sh" RESULTS_FILE_NAME
# Sets root (the checkout), lib ($PYLIB: the pure-Python packages the device image lacks), d (.device), w (work dir
# for llama.cpp and the models), out ($OUT), res (the results file) and start; el and log time-stamp the output.
root=$(pwd); lib=${PYLIB:-$root/.cudawork/lead/pylib}; d=$root/.device; w=/tmp/wcpu
out=${OUT:-/tmp/out}; mkdir -p "$out" "$w"; res="$out/$1"
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
log() { echo "[$(el) s] $*" | tee -a "$res"; }

# llama.cpp (CPU, GGML_NATIVE) with the given targets, unless a warm machine built them already. Run it in the
# background (&): it prints its rc when done.
build_llamacpp_cpu() {
  local have=1 t
  for t in "$@"; do [ -x "$w/b/bin/$t" ] || have=0; done
  [ "$have" = 1 ] && return 0
  ( cd "$w" && { [ -d llama.cpp ] || tar xJf "$d/llamacpp-pruned.tar.xz"; } &&
    cmake -S llama.cpp -B b -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_SERVER=OFF -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF >b.log 2>&1 &&
    cmake --build b -j 8 --target "$@" >>b.log 2>&1; echo "[llama.cpp build rc=$?]" )
}

# Random-weight GGUFs of real shapes, SHAPE:TYPE each, as $w/SHAPE-TYPE.gguf; existing files are kept.
gen_models() {
  local s f
  for s in "$@"; do
    f="$w/${s%%:*}-${s##*:}.gguf"
    [ -f "$f" ] || python3 "$d/gen_random_gguf.py" "$f" "${s%%:*}" "$lib" "${s##*:}" >/dev/null || echo "gen $s failed"
  done
}

# muser's CPU build in build/cpu, its extension copied into src/muser; the log goes to $out/$1. Fails loudly.
build_muser_cpu() {
  if ! { cmake -S . -B build/cpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DMUSER_CUDA=OFF \
           -DPython_EXECUTABLE="$(command -v python3)" && cmake --build build/cpu -j 8; } >"$out/$1" 2>&1; then
    tail -30 "$out/$1"; log "MUSER BUILD FAILED"; return 1
  fi
  cp build/cpu/_core*.so src/muser/
}
