#!/usr/bin/env bash
# Benchmarks of the release daemon.
#
# Usage: scripts/bench.sh BENCHMARK
#   ingest   raw LMDB group-commit rate vs records/s acknowledged by the
#            daemon's ingest API (64 keep-alive connections, 1 KB bodies),
#            from a Rust client and from wrk (one epoll thread, Lua POST
#            script): ratio, daemon CPU us per acked record, records per
#            commit, ack latency p50/p99, RSS idle/under load; beside
#            them the floor of the same run: the raw LMDB writer's CPU per
#            record and a bare HTTP server's (same hyper and tokio, answers
#            200 and nothing else) CPU per request under the same wrk load,
#            and the ceiling: the same bare server committing each body to
#            LMDB before it answers (three ways of forming the groups), its
#            ratio and CPU per record (benches/ingest.rs); every CPU figure
#            with its kernel part, each measurement with the share of the
#            host's CPU time stolen by the hypervisor meanwhile; installs
#            wrk when missing
#   databases rows/s into PostgreSQL and ClickHouse (servers started in temp
#            dirs) through the connector's sinks and end to end through the
#            daemon, against a raw bulk load of the same rows (psql \copy,
#            one HTTP JSONEachRow insert) in the same run (benches/databases.rs)
#   modbus   read requests/s (125 registers) on one connection to the
#            simulator vs a libmodbus C client on the same simulator, their
#            ratio; poll-start jitter p99 under ingest load; RSS with 50
#            simulated devices (benches/modbus.rs, benches/modbus_client.c)
#   nats     JetStream -> connector -> push queue messages/s acked vs a raw
#            consume+ack of the same messages on the same server (benches/nats.rs)
#   commands HTTP write -> daemon -> Modbus simulator -> answer, p50/p99 latency
#            of one point vs a raw tokio-modbus FC 16 write to the same simulator
#            in the same run; one command of 100 points (benches/commands.rs)
#   sparkplug metrics/s simulator -> connector -> sparkplug sink -> mosquitto ->
#            subscriber vs the same protobuf messages from a bare rumqttc
#            client in the same run, their ratio; bytes on the wire per metric
#            against the JSON mqtt sink fed the same polls (benches/sparkplug.rs)
#   fleet    N gateways (1, 4, 16) on this box, each fed by its own ingest
#            load, publishing into a three-node JetStream cluster (every
#            write synced, then JetStream's default sync): acked records/s
#            in all and per gateway, RSS and CPU per record of the gateways,
#            the stream's stored count against the acked total; a config
#            round, load on: one signed kv put per gateway to every
#            gateway's state.<id> at the new revision, on three nodes and
#            after one stopped (benches/fleet.rs)
#   s7       200 points over three DBs (800 bytes) from python-snap7's server:
#            ReadVar requests per poll against the minimum the PDU allows, and
#            polls/s of our client against python-snap7's own client
#            (read_multi_vars) in the same run, their ratio (benches/s7.rs)
#   instructions  user-space instructions per acked ingest request, counted
#            by valgrind's callgrind (a count, not a time: the same to within
#            about 1 % from run to run on a busy or shared box): the daemon
#            (a build with its symbols) under a fixed number of 1 KB requests
#            from 16 keep-alive connections, in all and for its main parts
#            (the ingest handler, parsing the body, the engine's offer, the
#            queue writer's commits, hyper reading a request head); the
#            number to compare before and after a cut of the CPU per record
#            (the kernel's part, the loopback path and the syncs, is not
#            counted); installs valgrind when missing
#   opcua-server  100 simulated devices x 100 points polled every second,
#            served over OPC-UA, 10 000 monitored items subscribed by one
#            asyncua client, against node-opcua's own server serving 10 000
#            variables changing every second to the same client: CPU and RSS
#            of both and their ratios (the connector's polls included, and
#            shown alone), and of async-opcua's own server alone serving the
#            same variables (the stack's ceiling), poll -> notification
#            p50/p99, ingest records/s
#            from 64 clients with the server and without it
#            (benches/opcua_server.rs); the daemon is this machine's musl
#            artifact with the server (scripts/build-release.sh), unless
#            OPEX_CONNECTOR_BIN names another; installs asyncua and
#            node-opcua as scripts/test.sh pins them when missing
#   reload   50 reloads (POST /api/config: the flows, a schedule, an ingest
#            source's token, a second device's points, a sink added and
#            removed) under 16 ingest clients while one device of the
#            simulator is polled every 100 ms: request -> applied answer
#            p50/p99/max, the clients' requests not answered 200, the
#            device's longest gap between two polls and its polls missed;
#            then a restart of the same daemon under the same load: signal
#            -> first 200 again, requests refused, the device's gap
#            (benches/reload.rs)
#
# Environment: BENCH_SECS (default 10) per measurement, BENCH_CONNS (default
# 64; databases: 16), BENCH_ROWS (databases: default 100000), BENCH_DIR (temp
# folder, default under the target dir), RUST_LOG for the daemon (default
# warn), BENCH_MESSAGES (nats, default 20000), BENCH_COMMANDS (commands,
# default 500), BENCH_BULK (commands: 100-point commands, default 10),
# BENCH_DEVICES, BENCH_INTERVAL_MS, BENCH_RECORDS, BENCH_ROUNDS (sparkplug: 20
# units every 20 ms, 20000 records queued, the median of 3 rounds),
# BENCH_FLEET (fleet sizes, default 1,4,16; BENCH_CONNS is then per gateway,
# default 16), BENCH_FLEET_SYNC (always, default or both; default both),
# BENCH_WRK (ingest: the wrk binary, default wrk on PATH), BENCH_REQUESTS
# (instructions: requests counted, default 3200, after 320 not counted),
# BENCH_POINTS and BENCH_PUBLISHING_MS (opcua-server: points per device,
# default 100; publishing interval, default 1000; BENCH_DEVICES default 100,
# BENCH_SECS default 20), BENCH_RELOADS (reload: default 50),
# OPEX_CONNECTOR_BIN (the daemon the benches run, e.g. a release artifact of
# scripts/build-release.sh for this machine; default: the release build made
# here first, and for opcua-server this machine's musl artifact with the server;
# instructions always counts its own build).
# Honours CARGO_TARGET_DIR.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

usage() {
    sed -n '2,/^# Honours CARGO_TARGET_DIR/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

# Cargo's target folder as an absolute path (CARGO_TARGET_DIR is relative to
# the repository when it is not absolute).
cargo_target_dir() {
    case "${CARGO_TARGET_DIR:-$repo/target}" in
        /*) echo "${CARGO_TARGET_DIR:-$repo/target}" ;;
        *) echo "$repo/$CARGO_TARGET_DIR" ;;
    esac
}

# Builds the release daemon and exports OPEX_CONNECTOR_BIN: a copy of it, since
# `cargo bench` rebuilds into the same folder with the bench profile. A daemon
# the caller names in OPEX_CONNECTOR_BIN is measured instead.
release_daemon() {
    local target_dir
    target_dir="$(cargo_target_dir)"
    if [[ -n "${OPEX_CONNECTOR_BIN:-}" ]]; then
        [[ -x "$OPEX_CONNECTOR_BIN" ]] || {
            echo "OPEX_CONNECTOR_BIN=$OPEX_CONNECTOR_BIN is not an executable" >&2
            exit 2
        }
        echo "==> the daemon measured: $OPEX_CONNECTOR_BIN"
        return
    fi
    echo "==> cargo build --release"
    cargo build --release
    # `cargo bench` rebuilds the binary with the bench profile into the same
    # folder; measure a copy of exactly what `cargo build --release` made.
    mkdir -p "$target_dir/bench-bin"
    cp -f "$target_dir/release/opex-connector" "$target_dir/bench-bin/opex-connector"
    export OPEX_CONNECTOR_BIN="$target_dir/bench-bin/opex-connector"
}

# Builds this machine's musl release artifact with the northbound OPC-UA server
# (scripts/build-release.sh: musl's allocator, as the boards' musl builds have, and
# the build the server's size limit is measured on) and exports OPEX_CONNECTOR_BIN
# to it. A daemon the caller names in OPEX_CONNECTOR_BIN is measured instead (the
# glibc release build: OPEX_CONNECTOR_BIN=target/release/opex-connector).
musl_server_daemon() {
    local target version
    if [[ -n "${OPEX_CONNECTOR_BIN:-}" ]]; then
        release_daemon
        return
    fi
    target="$(uname -m)-unknown-linux-musl"
    version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
    echo "==> scripts/build-release.sh --with-opcua-server $target"
    scripts/build-release.sh --with-opcua-server "$target"
    export OPEX_CONNECTOR_BIN="$repo/dist/opex-connector-$version-$target-with-opcua-server"
    echo "==> the daemon measured: $OPEX_CONNECTOR_BIN"
}

bench_ingest() {
    if ! command -v wrk >/dev/null 2>&1; then
        echo "==> apt-get install wrk (the light load client)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wrk
    fi
    release_daemon
    echo "==> cargo bench --bench ingest (BENCH_SECS=${BENCH_SECS:-10})"
    cargo bench --bench ingest
}

bench_databases() {
    release_daemon
    echo "==> cargo bench --bench databases (BENCH_ROWS=${BENCH_ROWS:-100000})"
    cargo bench --bench databases
}

bench_modbus() {
    if ! dpkg-query -W -f='${Status}' libmodbus-dev 2>/dev/null | grep -q 'install ok installed'; then
        echo "==> apt-get install libmodbus-dev (the reference client)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libmodbus-dev pkg-config
    fi
    release_daemon
    local bin_dir
    bin_dir="$(cargo_target_dir)/bench-bin"
    mkdir -p "$bin_dir"
    echo "==> cc benches/modbus_client.c -lmodbus"
    # shellcheck disable=SC2046 # pkg-config prints several flags
    cc -O2 -o "$bin_dir/modbus_client" benches/modbus_client.c $(pkg-config --cflags --libs libmodbus)
    export MODBUS_C_CLIENT="$bin_dir/modbus_client"
    echo "==> cargo bench --bench modbus (BENCH_SECS=${BENCH_SECS:-10})"
    cargo bench --bench modbus
}

bench_nats() {
    release_daemon
    echo "==> cargo bench --bench nats (BENCH_MESSAGES=${BENCH_MESSAGES:-20000})"
    cargo bench --bench nats
}

bench_commands() {
    release_daemon
    echo "==> cargo bench --bench commands (BENCH_COMMANDS=${BENCH_COMMANDS:-500}, BENCH_BULK=${BENCH_BULK:-10})"
    cargo bench --bench commands
}

bench_sparkplug() {
    release_daemon
    echo "==> cargo bench --bench sparkplug (BENCH_RECORDS=${BENCH_RECORDS:-20000})"
    cargo bench --bench sparkplug
}

bench_fleet() {
    release_daemon
    echo "==> cargo bench --bench fleet (BENCH_FLEET=${BENCH_FLEET:-1,4,16} BENCH_FLEET_SYNC=${BENCH_FLEET_SYNC:-both} BENCH_SECS=${BENCH_SECS:-10})"
    cargo bench --bench fleet
}

bench_reload() {
    release_daemon
    echo "==> cargo bench --bench reload (BENCH_RELOADS=${BENCH_RELOADS:-50})"
    cargo bench --bench reload
}

bench_opcua_server() {
    local pinned npm_dir=/var/tmp/opex-connector-npm
    pinned="$(sed -n 's/^ASYNCUA_VERSION=//p' scripts/test.sh)"
    if ! python3 -c "import asyncua" 2>/dev/null; then
        echo "==> pip install asyncua==$pinned (the subscriber)"
        python3 -m pip install --quiet "asyncua==$pinned"
    fi
    pinned="$(sed -n 's/^NODE_OPCUA_CLIENT_VERSION=//p' scripts/test.sh)"
    if [[ ! -d "$npm_dir/node_modules/node-opcua-server" ]]; then
        command -v npm >/dev/null || {
            apt-get update -qq
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm
        }
        echo "==> npm install node-opcua-server@$pinned (the reference server)"
        npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error --save-exact "node-opcua-server@$pinned"
    fi
    musl_server_daemon
    echo "==> cargo bench --bench opcua_server (BENCH_SECS=${BENCH_SECS:-20} BENCH_DEVICES=${BENCH_DEVICES:-100} BENCH_POINTS=${BENCH_POINTS:-100})"
    cargo bench --bench opcua_server
}

bench_s7() {
    echo "==> cargo bench --bench s7 (BENCH_SECS=${BENCH_SECS:-10})"
    cargo bench --bench s7
}

# The ingest client of `instructions`: CLIENTS threads, each on one keep-alive
# connection, posting REQUESTS/CLIENTS 1 KB records to 127.0.0.1:PORT; fails
# unless every answer is a 200.
ingest_client() {
    python3 - "$@" <<'PY'
import http.client
import sys
import threading

port, clients, requests = (int(a) for a in sys.argv[1:4])
head = '{"client":0,"n":0,"temp_c":21.5,"pad":"'
body = (head + "x" * (1024 - len(head) - 2) + '"}').encode()
headers = {"Authorization": "Bearer bench-token-0123", "Content-Type": "application/json"}
failed = []


def client(i):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    for _ in range(requests // clients):
        conn.request("POST", f"/api/ingest/bench/c{i}", body=body, headers=headers)
        answer = conn.getresponse()
        answer.read()
        if answer.status != 200:
            failed.append(answer.status)


threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
for t in threads:
    t.start()
for t in threads:
    t.join()
if failed:
    sys.exit(f"{len(failed)} answers were not 200: {sorted(set(failed))}")
PY
}

bench_instructions() {
    if ! command -v valgrind >/dev/null 2>&1; then
        echo "==> apt-get install valgrind (callgrind counts the instructions)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends valgrind
    fi
    local target_dir
    target_dir="$(cargo_target_dir)"
    # The bench profile is the release profile with its symbols kept, so the
    # counts can be given by function.
    echo "==> cargo build --profile bench --bin opex-connector (the release build, with symbols)"
    cargo build --profile bench --bin opex-connector
    local bin="$target_dir/release/opex-connector"
    local requests="${BENCH_REQUESTS:-3200}" clients=16
    local work port pid
    mkdir -p "${BENCH_DIR:-$target_dir/tmp}"
    work="$(mktemp -d "${BENCH_DIR:-$target_dir/tmp}/opex-bench-instructions-XXXXXX")"
    cat >"$work/bench.yaml" <<YAML
connector:
  name: bench
  data_dir: "$work/data"
  http:
    listen: 127.0.0.1:0
    max_body_kb: 64
  push_queue:
    enabled: true
    max_quota_mb: 1024
    on_full: evict_oldest
ingest:
  sources:
    - name: bench
      token: bench-token-0123
YAML
    echo "==> valgrind --tool=callgrind $bin run (files in $work)"
    RUST_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.out" \
        "$bin" run --config "$work/bench.yaml" >"$work/daemon.out" 2>"$work/daemon.log" &
    pid=$!
    # shellcheck disable=SC2064 # the pid and folder are fixed now
    trap "kill $pid 2>/dev/null || true" EXIT
    # The daemon binds a port the kernel picks and prints it: no other process can take it
    # between a probe and the bind.
    local waited=0
    until port="$(sed -n 's#^opex-connector listening on http://127\.0\.0\.1:\([0-9]*\)/$#\1#p' "$work/daemon.out")" && [ -n "$port" ]; do
        kill -0 "$pid" 2>/dev/null || { cat "$work/daemon.log" >&2; echo "the daemon stopped" >&2; exit 1; }
        ((waited++ < 600)) || { echo "the daemon printed no listening line within 60 s" >&2; exit 1; }
        sleep 0.1
    done
    echo "==> the daemon listens on port $port"
    echo "==> $((requests / 10)) requests not counted (warm-up), then $requests counted, $clients connections"
    ingest_client "$port" "$clients" "$((requests / 10))"
    callgrind_control --zero "$pid" >/dev/null 2>&1
    ingest_client "$port" "$clients" "$requests"
    callgrind_control --dump "$pid" >/dev/null 2>&1
    kill -TERM "$pid"
    wait "$pid" || true
    trap - EXIT
    local dump
    dump="$(find "$work" -name 'callgrind.out.*' | sort | head -n1)"
    [ -n "$dump" ] || { echo "callgrind wrote no dump in $work" >&2; exit 1; }
    # Inclusive counts: a part's figure holds everything it calls.
    callgrind_annotate --inclusive=yes "$dump" >"$work/annotate.txt"
    echo
    printf '| %-44s | %14s |\n' "user-space instructions per acked request" "instructions"
    printf '|%s|%s|\n' "$(printf -- '-%.0s' {1..46})" "$(printf -- '-%.0s' {1..16})"
    awk -v n="$requests" '
        function row(name, pattern) {
            for (i = 1; i <= count; i++) if (fn[i] ~ pattern) { printf "| %-44s | %14.0f |\n", name, ir[i] / n; return }
            printf "| %-44s | %14s |\n", name, "n/a"
        }
        { v = $1; gsub(",", "", v) }
        /PROGRAM TOTALS/ { total = v }
        / \(.*%\)  / && v ~ /^[0-9]+$/ { count++; ir[count] = v; fn[count] = $0 }
        END {
            printf "| %-44s | %14.0f |\n", "all of the daemon", total / n
            row("the ingest handler (routes::handle)", "http::routes::handle::")
            row("  parsing the body (Record::from_json)", "record::Record::from_json")
            row("  the engine offer (Engine::offer)", "engine::offer::Engine::offer::")
            row("  reading the body (read_body)", "http::respond::read_body")
            row("the queue writer (Writer::commit_group)", "queue::commit::Writer::commit_group")
            row("hyper reading a request head", "h1::conn::Conn<I,B,T>::poll_read_head")
        }' "$work/annotate.txt"
    echo
    echo "(inclusive counts; the kernel is not counted; the whole listing: $work/annotate.txt)"
}

case "${1:-}" in
    ingest) bench_ingest ;;
    databases) bench_databases ;;
    modbus) bench_modbus ;;
    nats) bench_nats ;;
    commands) bench_commands ;;
    sparkplug) bench_sparkplug ;;
    fleet) bench_fleet ;;
    s7) bench_s7 ;;
    instructions) bench_instructions ;;
    opcua-server) bench_opcua_server ;;
    reload) bench_reload ;;
    -h | --help | help) usage ;;
    "")
        usage >&2
        exit 2
        ;;
    *)
        echo "unknown benchmark: $1 (known: ingest, databases, modbus, nats, commands, sparkplug, fleet, s7, instructions)" >&2
        exit 2
        ;;
esac
