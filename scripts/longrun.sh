#!/usr/bin/env bash
# Long run: the release daemon under steady load, sampled every minute, then a verdict on
# whether anything grew.
#
# Usage: scripts/longrun.sh [MINUTES]        (default 60)
#   LONGRUN_RATE=N         ingest requests per second (default 20)
#   LONGRUN_SAMPLE_SECS=N  seconds between samples (default 60)
#   LONGRUN_CSV=FILE       where the samples go (default longrun-<date>.csv in the temp dir)
#   OPEX_BIN=PATH          use this binary instead of building `cargo build --release`
#
# It starts the daemon with its built-in Modbus simulator polled once a second (two groups),
# an uplink to a local receiver that accepts every batch, and one ingest client at a fixed
# rate on a keep-alive connection. Every sample holds: elapsed seconds, VmRSS (KiB), open
# files (/proc/PID/fd), push queue rows and used bytes, records sent upstream, ingest
# records stored, Modbus records, ingest errors. At the end it compares the mean of the
# first third of the samples with the last third: RSS may grow by at most 10 % + 4 MiB, open
# files by 5, queue rows by 500; otherwise it says what grew and exits 1. Last, with the load
# stopped and before the daemon is stopped, it reads `GET /api/ledger?verify=1` once and says
# whether every source balanced (acked = delivered + pending + dead_lettered + lost) and the
# push queue's pending counts agreed with its rows; otherwise it exits 1 as well.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
minutes="${1:-60}"
rate="${LONGRUN_RATE:-20}"
sample="${LONGRUN_SAMPLE_SECS:-60}"
work="$(mktemp -d /tmp/opex-longrun.XXXXXX)"
csv="${LONGRUN_CSV:-$work/longrun-$(date +%Y%m%d-%H%M).csv}"

if [[ -z "${OPEX_BIN:-}" ]]; then
    (cd "$repo" && nice -n 10 cargo build --release --quiet)
    OPEX_BIN="${CARGO_TARGET_DIR:-$repo/target}/release/opex-connector"
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
http_port=$(free_port)
modbus_port=$(free_port)
recv_port=$(free_port)
token="longrun-t0ken-0123"
# The push queue check at the end (GET /api/ledger?verify=1) is an admin call.
admin_token="longrun-adm1n-0123"

# The uplink receiver: answers 200 to every batch and counts the lines.
cat >"$work/receiver.py" <<'PY'
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(n)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY

# The load: one keep-alive client at a fixed rate; prints the errors it met when stopped.
cat >"$work/load.py" <<'PY'
import http.client, json, signal, sys, time
port, rate, token = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
errors = 0
def stop(*_):
    print(f"load: errors={errors}", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
conn = None
n = 0
start = time.monotonic()
while True:
    n += 1
    body = json.dumps({"n": n, "temp_c": 20 + n % 10, "line": "longrun"})
    try:
        if conn is None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("POST", f"/api/ingest/load/k{n % 100}", body,
                     {"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        if r.status != 200:
            errors += 1
    except Exception:
        errors += 1
        conn = None
    delay = start + n / rate - time.monotonic()
    if delay > 0:
        time.sleep(delay)
PY

# One sample's figures from /api/status.
cat >"$work/sample.py" <<'PY'
import json, sys
s = json.load(sys.stdin)
q = s["push_queue"]
src = {x["name"]: x for x in s.get("sources", [])}
load = src.get("ingest/load", {})
dev = [d for d in s.get("devices", []) if d.get("name") == "plant-1"]
polls = dev[0].get("polls_total", 0) if dev else 0
print(",".join(str(v) for v in (q["rows"], q["used_bytes"], s["uplink"]["sent_total"],
                                 load.get("stored", 0), polls, load.get("refused", 0))))
PY

cat >"$work/config.yaml" <<YAML
connector:
  name: longrun
  data_dir: $work/data
  http:
    listen: 127.0.0.1:$http_port
    admin_token: $admin_token
  push_queue:
    enabled: true
    max_quota_mb: 64
    on_full: evict_oldest
  push:
    url: http://127.0.0.1:$recv_port/ingest
    batch_rows: 500
ingest:
  sources:
    - name: load
      token: $token
simulator:
  modbus: 127.0.0.1:$modbus_port
devices:
  - name: plant-1
    protocol: modbus_tcp
    host: 127.0.0.1
    port: $modbus_port
    timeout_ms: 500
    groups:
      - {name: process, interval_ms: 1000}
      - {name: counters, interval_ms: 5000}
    points:
      - {name: oven_temp, group: process, register: 0, type: f32}
      - {name: coolant_temp, group: process, register: 2, type: f32}
      - {name: pressure, group: process, register: 7, type: i16, scale: 0.1}
      - {name: pump_running, group: process, register: 0, kind: coil}
      - {name: parts, group: counters, register: 4, type: u32}
      - {name: model, group: counters, register: 8, type: string, length: 8}
YAML

pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT

python3 "$work/receiver.py" "$recv_port" & pids+=($!)
"$OPEX_BIN" run --config "$work/config.yaml" >"$work/stdout.log" 2>"$work/stderr.log" &
daemon=$!
pids+=("$daemon")
for _ in $(seq 1 300); do
    grep -q "listening on" "$work/stdout.log" 2>/dev/null && break
    sleep 0.1
done
grep -q "listening on" "$work/stdout.log" || { echo "the daemon did not start:"; tail "$work/stderr.log"; exit 1; }
nice -n 5 python3 "$work/load.py" "$http_port" "$rate" "$token" >"$work/load.log" 2>&1 & load=$!
pids+=("$load")

echo "longrun: ${minutes} min, ${rate} req/s ingest + Modbus polling, sample every ${sample}s, pid $daemon, work dir $work"
echo "elapsed_s,rss_kb,open_fds,queue_rows,queue_used_bytes,sent_total,ingest_stored,modbus_polls,ingest_refused" >"$csv"
started=$(date +%s)
end=$((started + minutes * 60))
while :; do
    now=$(date +%s)
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$daemon/status")
    fds=$(find "/proc/$daemon/fd" -mindepth 1 -maxdepth 1 | wc -l)
    line=$(curl -s "http://127.0.0.1:$http_port/api/status" | python3 "$work/sample.py")
    echo "$((now - started)),$rss,$fds,$line" | tee -a "$csv"
    ((now >= end)) && break
    sleep "$sample"
done

kill "$load" 2>/dev/null || true
wait "$load" 2>/dev/null || true
cat "$work/load.log"
curl -s -H "Authorization: Bearer $admin_token" "http://127.0.0.1:$http_port/api/ledger?verify=1" >"$work/ledger.json" || true
kill -TERM "$daemon"
wait "$daemon" || true

verdict=0
python3 - "$csv" <<'PY' || verdict=1
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
if len(rows) < 3:
    print("verdict: too few samples to compare"); sys.exit(0)
k = max(1, len(rows) // 3)
first, last = rows[:k], rows[-k:]
mean = lambda rs, c: sum(float(r[c]) for r in rs) / len(rs)
bounds = {"rss_kb": lambda a: a * 1.10 + 4096, "open_fds": lambda a: a + 5, "queue_rows": lambda a: a + 500}
grew = []
for col, bound in bounds.items():
    a, b = mean(first, col), mean(last, col)
    print(f"{col}: first third {a:.0f}, last third {b:.0f}, max {max(float(r[col]) for r in rows):.0f}")
    if b > bound(a):
        grew.append(col)
ing = float(rows[-1]["ingest_stored"]) - float(rows[0]["ingest_stored"])
secs = float(rows[-1]["elapsed_s"]) - float(rows[0]["elapsed_s"])
print(f"ingest: {ing:.0f} records stored in {secs:.0f} s ({ing / max(secs, 1):.1f}/s); sent upstream {rows[-1]['sent_total']}; modbus polls {rows[-1]['modbus_polls']}")
print("verdict: " + ("GREW: " + ", ".join(grew) if grew else "no growth"))
sys.exit(1 if grew else 0)
PY

# The ledger, read once at the end of the run.
python3 - "$work/ledger.json" <<'PY' || verdict=1
import json, sys
try:
    ledger = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    print(f"ledger: could not read GET /api/ledger: {e}")
    sys.exit(1)
for name, c in sorted(ledger.get("sources", {}).items()):
    print(f"ledger: {name}: acked {c['acked']} = delivered {c['delivered']} + pending {c['pending']}"
          f" + dead_lettered {c['dead_lettered']} + lost {c['lost']} (imbalance {c['imbalance']})")
check = ledger.get("push_queue_check", {})
agrees = check.get("agrees", True) if check.get("checked") else True
ok = ledger.get("balanced") is True and agrees
if not agrees:
    print(f"ledger: the push queue's pending counts disagree with its rows: {check.get('mismatches')}")
print("ledger: " + ("balanced" if ok else f"NOT BALANCED: {ledger.get('imbalances')}"))
sys.exit(0 if ok else 1)
PY
if ((verdict != 0)); then
    exit 1
fi
