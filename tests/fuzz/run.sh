#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, NUMEQ_BUILD_FUZZERS) and runs each for SECONDS seconds
# (default 60) from its seed corpus, one target at a time. Exits non-zero on the first finding:
# libFuzzer leaves the input as crash-*/timeout-*/oom-* in the work directory; turn it into a
# GoogleTest case in tests/cpp/core before fixing it.
#
#   tests/fuzz/run.sh [SECONDS] [BUILD_DIR]      e.g. tests/fuzz/run.sh 120
#
# Environment: CXX (default clang++), FUZZ_JOBS (default 1), FUZZ_WORK (default BUILD_DIR/fuzz-work),
# FUZZ_SEED (default 1; 0: random).
set -euo pipefail
seconds=${1:-60}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${2:-$root/build-fuzz}
work=${FUZZ_WORK:-$build/fuzz-work}

# -O1: fast enough to fuzz, and clang compiles the xtensor-heavy sources far sooner than at -O2.
cmake -S "$root" -B "$build" -DCMAKE_CXX_COMPILER="${CXX:-clang++}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
  -DNUMEQ_BUILD_FUZZERS=ON -DNUMEQ_BUILD_TESTS=OFF -DNUMEQ_BUILD_BENCHMARKS=OFF -DNUMEQ_INSTALL=OFF >/dev/null
cmake --build "$build" --target fuzz_plan_json fuzz_platform_name -j "${FUZZ_JOBS:-1}"

for target in fuzz_plan_json fuzz_platform_name; do
  # A scratch corpus: libFuzzer adds what it finds there; the seeds stay as committed.
  mkdir -p "$work/$target"
  # FUZZ_SEED (default 1): the same seed replays the same inputs in the same order, so a CI
  # finding reproduces; FUZZ_SEED=0 lets libFuzzer pick one (for long exploratory runs).
  (cd "$work" && "$build/tests/fuzz/$target" -seed="${FUZZ_SEED:-1}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
     -max_len=16384 -print_final_stats=1 "$work/$target" "$here/corpus/$target")
done
