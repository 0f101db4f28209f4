#!/usr/bin/env bash
# Benchmarks of the release daemon.
#
# Usage: scripts/bench.sh BENCHMARK
#   ingest   raw LMDB group-commit rate vs records/s acknowledged by the
#            daemon's ingest API (64 keep-alive connections, 1 KB bodies),
#            ack latency p50/p99 and RSS idle/under load (benches/ingest.rs)
#   nats     JetStream -> connector -> push queue messages/s acked vs a raw
#            consume+ack of the same messages on the same server (benches/nats.rs)
#
# Environment: BENCH_SECS (default 10) per measurement, BENCH_CONNS (default
# 64), BENCH_DIR (temp folder, default under the target dir), RUST_LOG for the
# daemon (default warn), BENCH_MESSAGES (nats, default 20000). Honours
# CARGO_TARGET_DIR.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

usage() {
    sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

release_bin() {
    local target_dir="${CARGO_TARGET_DIR:-$repo/target}"
    case "$target_dir" in
        /*) ;;
        *) target_dir="$repo/$target_dir" ;;
    esac
    echo "==> cargo build --release"
    cargo build --release
    # `cargo bench` rebuilds the binary with the bench profile into the same
    # folder; measure a copy of exactly what `cargo build --release` made.
    mkdir -p "$target_dir/bench-bin"
    cp -f "$target_dir/release/opex-connector" "$target_dir/bench-bin/opex-connector"
    export OPEX_CONNECTOR_BIN="$target_dir/bench-bin/opex-connector"
}

bench_ingest() {
    release_bin
    echo "==> cargo bench --bench ingest (BENCH_SECS=${BENCH_SECS:-10})"
    cargo bench --bench ingest
}

bench_nats() {
    release_bin
    echo "==> cargo bench --bench nats (BENCH_MESSAGES=${BENCH_MESSAGES:-20000})"
    cargo bench --bench nats
}

case "${1:-}" in
    ingest) bench_ingest ;;
    nats) bench_nats ;;
    -h | --help | help) usage ;;
    "")
        usage >&2
        exit 2
        ;;
    *)
        echo "unknown benchmark: $1 (known: ingest, nats)" >&2
        exit 2
        ;;
esac
