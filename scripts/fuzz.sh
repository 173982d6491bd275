#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ (issue 16) for a bounded time, as CI does:
# scripts/test.sh calls this for whole-suite runs. Fails (non-zero) if any target panics,
# hangs on one input or runs out of memory, and prints the input that did it.
#
#   scripts/fuzz.sh                     # every target, FUZZ_SECONDS (60) each
#   FUZZ_SECONDS=600 scripts/fuzz.sh records config
#
# Each run starts from the committed corpus (fuzz/corpus/<target>/) and writes what it
# discovers to a temporary directory, so the committed corpus never grows by itself; a
# crashing input lands in fuzz/artifacts/<target>/ (ignored by git).
#
# Environment:
#   FUZZ_SECONDS    how long each target runs (default 60)
#   FUZZ_SANITIZER  cargo fuzz's --sanitizer (default none: the fuzzed code is safe Rust,
#                   what is looked for is a panic, and AddressSanitizer doubles the build
#                   and halves the executions; set it to address for long runs)
#
# cargo-fuzz needs nightly compiler flags (-Zsanitizer, -Cpasses=sancov-module). With only
# a stable toolchain, RUSTC_BOOTSTRAP=1 lets stable rustc take them; it changes nothing
# for the workspace build, which never sees it.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

seconds=${FUZZ_SECONDS:-60}
sanitizer=${FUZZ_SANITIZER:-none}
# The version this was last tried with; `cargo install --locked` of it is reproducible.
cargo_fuzz_version=0.13.2
# One input taking longer than this is a hang (issue 11: quadratic parsing took 40s).
per_input_timeout=10
# libFuzzer stops at -max_total_time only between inputs; past this margin the run is
# ended from outside and counted as a failure.
margin=60

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz $cargo_fuzz_version"
    cargo install cargo-fuzz --locked --version "$cargo_fuzz_version"
fi

export RUSTC_BOOTSTRAP=1
fuzz=(cargo fuzz)
build_opts=(--sanitizer "$sanitizer")

if (($# > 0)); then
    targets=("$@")
else
    mapfile -t targets < <("${fuzz[@]}" list)
fi

start=$SECONDS
echo "fuzz.sh: building ${targets[*]} (sanitizer: $sanitizer)"
"${fuzz[@]}" build "${build_opts[@]}"
echo "fuzz.sh: built in $((SECONDS - start))s"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

failed=()
for target in "${targets[@]}"; do
    corpus="$PWD/fuzz/corpus/$target"
    artifacts="$PWD/fuzz/artifacts/$target"
    mkdir -p "$work/$target" "$artifacts"
    dict=()
    if [ -f "fuzz/dicts/$target.dict" ]; then
        dict=("-dict=$PWD/fuzz/dicts/$target.dict")
    fi
    log="$work/$target.log"
    status=0
    timeout --signal=INT --kill-after=10 "$((seconds + margin))" \
        "${fuzz[@]}" run "${build_opts[@]}" "$target" "$work/$target" "$corpus" -- \
        -max_total_time="$seconds" -timeout="$per_input_timeout" \
        -artifact_prefix="$artifacts/" -print_final_stats=1 "${dict[@]}" \
        >"$log" 2>&1 || status=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    if ((status == 0)); then
        echo "fuzz.sh: $target: no crash in ${seconds}s (${runs:-?} executions, ${rate:-?}/s)"
        continue
    fi
    failed+=("$target")
    tail -n 60 "$log" >&2
    input=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
    if [ -n "$input" ]; then
        echo "fuzz.sh: $target FAILED (exit $status) on the input $input;" \
            "reproduce: RUSTC_BOOTSTRAP=1 cargo fuzz run ${build_opts[*]} $target $input" >&2
    else
        echo "fuzz.sh: $target FAILED (exit $status) without writing an input (see above)" >&2
    fi
done

echo "fuzz.sh: done in $((SECONDS - start))s"
if ((${#failed[@]} > 0)); then
    echo "fuzz.sh: failed: ${failed[*]}" >&2
    exit 1
fi
