#!/usr/bin/env bash
# The reliability campaign of the loss ledger, long version: runs tests/chaos.rs with
#   - kill -9 under mixed load (ingest API, signed webhooks, NATS JetStream, Modbus polling,
#     uplink to a receiver) for CYCLES cycles (CI runs 3), checking after every restart that
#     the stores open cleanly and GET /api/ledger?verify=1 balances, and at the end that every
#     acknowledged record reached the receiver with no loss;
#   - the data dir on an 8 MiB tmpfs filled up: 503s, alert, no crash, recovery once the
#     space returns (needs root to mount; skipped with a message otherwise).
# Then prints the figures (cycles, records, losses, recovery times).
#
# Usage: scripts/chaos.sh [--all] [CYCLES]        (CYCLES default 20, or $OPEX_CHAOS_CYCLES)
#   --all  also runs scripts/faults.sh (each peer stopped and restarted under load, the ledger
#          checked after each), then prints how to run the rest of the campaign: fuzzing
#          (scripts/fuzz.sh) and the long run (scripts/longrun.sh), which take long and are
#          run on their own.
# OPEX_CHAOS_ACKS sets the acknowledgements between two kills (default 500 here, 200 in CI).
# Needs nats-server and pymodbus (scripts/test.sh installs them). Honours CARGO_TARGET_DIR.
set -euo pipefail

all=0
if [[ "${1:-}" == "--all" ]]; then
    all=1
    shift
fi
cycles="${1:-${OPEX_CHAOS_CYCLES:-20}}"
acks="${OPEX_CHAOS_ACKS:-500}"
if ! [[ "$cycles" =~ ^[1-9][0-9]*$ ]]; then
    echo "scripts/chaos.sh: CYCLES must be a positive integer, got '${cycles}'" >&2
    exit 2
fi
if ! [[ "$acks" =~ ^[1-9][0-9]*$ ]]; then
    echo "scripts/chaos.sh: OPEX_CHAOS_ACKS must be a positive integer, got '${acks}'" >&2
    exit 2
fi

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

out="$(mktemp)"
trap 'rm -f "$out"' EXIT

echo "==> cargo test --test chaos (OPEX_CHAOS_CYCLES=${cycles} OPEX_CHAOS_ACKS=${acks})"
started=$(date +%s)
set +e
OPEX_CHAOS_CYCLES="$cycles" OPEX_CHAOS_ACKS="$acks" cargo test --test chaos -- --nocapture --test-threads=1 >"$out" 2>&1
status=$?
set -e
elapsed=$(($(date +%s) - started))

echo "==> figures"
grep -oE 'chaos: .*' "$out" || true
grep -E 'test result' "$out" || true
if ((status != 0)); then
    echo "==> FAILED after ${elapsed} s; the test output:" >&2
    tail -n 200 "$out" >&2
    exit "$status"
fi
echo "==> passed in ${elapsed} s"

if ((all == 0)); then
    exit 0
fi

echo "==> scripts/faults.sh (peers stopped and restarted under load)"
set +e
"$repo/scripts/faults.sh"
faults=$?
set -e
if ((faults != 0)); then
    echo "==> scripts/faults.sh FAILED (exit ${faults})" >&2
fi
echo "==> the rest of the campaign, run on their own (each takes long):"
echo "    fuzzing:  $repo/scripts/fuzz.sh [SECONDS_PER_TARGET]   (every fuzz/fuzz_targets/ target; crashes in fuzz/artifacts/)"
echo "    long run: $repo/scripts/longrun.sh [MINUTES]            (release daemon under steady load; growth verdict and ledger balance at the end)"
exit "$faults"
