#!/usr/bin/env bash
# Runs every cargo-fuzz target (fuzz/fuzz_targets/) for a bounded time and prints, per
# target, the executions, executions per second and crashes found.
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#   SECONDS_PER_TARGET  default 150; TARGET default: every target (`cargo fuzz list`).
#
# Installs cargo-fuzz from crates.io when it is missing. cargo-fuzz passes nightly-only
# flags (`-Z` sanitizer coverage) to rustc; on a stable toolchain RUSTC_BOOTSTRAP=1 lets
# rustc accept them. The targets are built with `--sanitizer none` (the crate is safe Rust;
# LMDB's C code is not instrumented either way) and with debug assertions, so an integer
# overflow is a crash. Runs niced. A crash leaves its input in fuzz/artifacts/<target>/ and
# makes the script exit 1; reproduce it with
#   RUSTC_BOOTSTRAP=1 cargo fuzz run -s none -a <target> fuzz/artifacts/<target>/crash-...
# Corpora grow in fuzz/corpus/<target>/ (not committed); config/ seeds the config target.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo" || exit 1
secs="${1:-150}"
shift || true

export RUSTC_BOOTSTRAP=1
export CARGO_INCREMENTAL=0
target_dir="${CARGO_TARGET_DIR:-$repo/target}/fuzz"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "==> cargo install cargo-fuzz"
    nice -n 10 cargo install cargo-fuzz --locked || exit 1
fi

targets=("$@")
if ((${#targets[@]} == 0)); then
    mapfile -t targets < <(cargo fuzz list)
fi

echo "==> building ${targets[*]}"
nice -n 10 cargo fuzz build -s none -a --target-dir "$target_dir" || exit 1

logs="$(mktemp -d)"
summary=()
failed=0
for t in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
    seeds=()
    [[ "$t" == config_yaml ]] && seeds=(config config/examples)
    echo "==> fuzzing $t for ${secs}s"
    before=$(find "fuzz/artifacts/$t" -type f | wc -l)
    nice -n 10 cargo fuzz run -s none -a --target-dir "$target_dir" "$t" \
        "fuzz/corpus/$t" "${seeds[@]}" -- \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        >"$logs/$t.log" 2>&1
    rc=$?
    after=$(find "fuzz/artifacts/$t" -type f | wc -l)
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$logs/$t.log" | tail -n1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$logs/$t.log" | tail -n1)
    crashes=$((after - before))
    if ((rc != 0 || crashes > 0)); then
        failed=1
        echo "--- $t failed (exit $rc); last lines:"
        tail -n 40 "$logs/$t.log"
    fi
    summary+=("$(printf '%-26s %12s %10s %8s' "$t" "${runs:-?}" "${rate:-?}" "$crashes")")
done

echo
printf '%-26s %12s %10s %8s\n' target executions exec/s crashes
printf '%s\n' "${summary[@]}"
echo "logs: $logs"
exit "$failed"
