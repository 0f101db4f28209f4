#!/usr/bin/env bash
# Fault injection on real peers: runs the tests that stop and restart each peer while
# records flow (nats-server, mosquitto, ClickHouse, PostgreSQL, the pymodbus device, the
# asyncua server, the uplink receiver, also flapping) and prints each recovery time: from
# the peer being back to the first record delivered or polled again. Each test also checks
# that every acknowledged record arrives and, at its end, that GET /api/ledger balances.
#
# Usage: scripts/faults.sh [ROUNDS]   (default 1: each test once; more rounds give spread)
# The peers must be installed (scripts/test.sh installs them). Honours CARGO_TARGET_DIR.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
rounds="${1:-1}"
export CARGO_INCREMENTAL=0

# test file, name filter
tests=(
    "nats a_killed_nats_server_loses_no_acked_message_and_the_consumer_resumes"
    "mqtt the_mqtt_sink_publishes_refuses_while_the_broker_is_down_and_delivers_after_it_is_back"
    "databases clickhouse_keeps_rows_while_the_server_is_down_and_inserts_them_after_restart"
    "databases postgres_keeps_rows_while_the_server_is_down_and_copies_them_after_restart"
    "modbus polling_resumes_after_the_device_is_killed_and_restarted"
    "opcua after_a_server_restart_values_flow_again_within_the_backoff"
    "uplink receiver_down_then_up_delivers_everything_in_order"
    "uplink a_flapping_receiver_gets_every_acked_record_and_each_recovery_is_bounded"
)

echo "==> building the test binaries"
nice -n 10 cargo test --no-run --test nats --test mqtt --test databases --test modbus \
    --test opcua --test uplink >/dev/null 2>&1 || {
    nice -n 10 cargo test --no-run --test nats --test mqtt --test databases --test modbus \
        --test opcua --test uplink
    exit 1
}

out="$(mktemp)"
failed=0
for ((r = 1; r <= rounds; r++)); do
    for t in "${tests[@]}"; do
        read -r file name <<<"$t"
        echo "==> round $r: $file $name"
        if ! nice -n 10 cargo test --quiet --test "$file" "$name" -- --exact --nocapture \
            >"$out.log" 2>&1; then
            failed=1
            echo "FAILED: $file $name"
            grep -A 12 'panicked at' "$out.log" | grep -v '^ *[0-9]*: \|^ *at ' | head -n 40
        fi
        grep '^recovery: ' "$out.log" | sed "s/^/$file: /" | tee -a "$out" || true
    done
done

echo
echo "recovery times (seconds from the peer back to the first record through):"
printf "%-32s %6s %8s %8s %8s\n" peer count min mean max
awk '{
    split($3, p, "="); peer = p[2]; for (i = 4; i < NF; i++) peer = peer " " $i
    split($NF, s, "="); v = s[2] + 0
    n[peer]++; sum[peer] += v; if (v > max[peer]) max[peer] = v
    if (!(peer in min) || v < min[peer]) min[peer] = v
} END {
    for (k in n) printf "%-32s %6d %8.3f %8.3f %8.3f\n", k, n[k], min[k], sum[k] / n[k], max[k]
}' "$out" | sort
exit "$failed"
