#!/usr/bin/env bash
# Over-the-air update of opex-connector, A/B with automatic rollback.
#
# Usage:
#   scripts/ota-update.sh --artifact URL|FILE --sha256 HEX --sig URL|FILE [options]
#
# Options (defaults in brackets):
#   --root DIR            install root [/opt/opex-connector]; layout:
#                         DIR/releases/<version>-<sha8>/opex-connector, DIR/current and
#                         DIR/previous are symlinks to release folders
#   --pubkey FILE         ed25519 public key, hex [/etc/opex-connector/release.pub]
#   --config FILE         config the new binary must accept [/etc/opex-connector/config.yaml]
#   --restart CMD         how to restart the service [systemctl restart opex-connector]
#   --health CMD          succeeds once the service is healthy
#                         [curl -sf STATUS_URL | grep -q '"healthy":true']
#   --status-url URL      for the default health check [http://127.0.0.1:8080/api/status]
#   --health-timeout SECS how long the new version has to become healthy [60]
#
# Steps: fetch the artifact and its signature; refuse it unless its SHA-256 matches and the
# RUNNING binary (trusted, unlike the new one) verifies its ed25519 signature; install it
# beside the current one; refuse it unless it validates the current config; switch the
# `current` symlink atomically; restart; wait for health. If the new version does not become
# healthy in time, switch back, restart the old one, wait for its health, and say so.
# The data dir and the config are never touched.
#
# Exit codes: 0 updated; 2 refused (nothing changed); 3 rolled back to the old version;
# 4 rollback failed too (the old version is installed but not healthy: look at the box).
set -euo pipefail

root=/opt/opex-connector
pubkey=/etc/opex-connector/release.pub
config=/etc/opex-connector/config.yaml
restart="systemctl restart opex-connector"
status_url=http://127.0.0.1:8080/api/status
health=""
health_timeout=60
artifact=""
sha256=""
sig=""

say() { echo "ota-update: $*" >&2; }
refuse() {
    say "refused: $*"
    exit 2
}

while [ $# -gt 0 ]; do
    case "$1" in
        --artifact) artifact="$2"; shift 2 ;;
        --sha256) sha256="$2"; shift 2 ;;
        --sig) sig="$2"; shift 2 ;;
        --root) root="$2"; shift 2 ;;
        --pubkey) pubkey="$2"; shift 2 ;;
        --config) config="$2"; shift 2 ;;
        --restart) restart="$2"; shift 2 ;;
        --health) health="$2"; shift 2 ;;
        --status-url) status_url="$2"; shift 2 ;;
        --health-timeout) health_timeout="$2"; shift 2 ;;
        -h | --help)
            sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *) refuse "unknown argument $1" ;;
    esac
done
if [ -z "$artifact" ] || [ -z "$sha256" ] || [ -z "$sig" ]; then
    refuse "--artifact, --sha256 and --sig are required"
fi
[ -n "$health" ] || health="curl -sf '$status_url' | grep -q '\"healthy\":true'"

current_bin="$root/current/opex-connector"
[ -x "$current_bin" ] || refuse "no installed version at $root/current (use scripts/install.sh first)"
[ -r "$pubkey" ] || refuse "public key $pubkey not readable"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fetch() { # SRC DEST
    case "$1" in
        http://* | https://*) curl -sfL --max-time 600 -o "$2" "$1" ;;
        *) cp -- "$1" "$2" ;;
    esac
}

fetch "$artifact" "$work/opex-connector" || refuse "cannot fetch $artifact"
fetch "$sig" "$work/opex-connector.sig" || refuse "cannot fetch $sig"

actual=$(sha256sum "$work/opex-connector" | cut -d' ' -f1)
[ "$actual" = "$(echo "$sha256" | tr 'A-F' 'a-f')" ] || refuse "sha256 mismatch: expected $sha256, got $actual"
"$current_bin" verify-artifact "$work/opex-connector" "$work/opex-connector.sig" "$pubkey" >&2 ||
    refuse "signature check failed"

chmod 0755 "$work/opex-connector"
new_version=$("$work/opex-connector" --version 2>/dev/null | head -n1 | awk '{print $2}') || true
[ -n "$new_version" ] || refuse "the new binary does not run here (wrong architecture?)"
"$work/opex-connector" validate "$config" >&2 || refuse "the new version $new_version rejects $config"

release="$new_version-${actual:0:8}"
mkdir -p "$root/releases/$release"
install -m 0755 "$work/opex-connector" "$root/releases/$release/opex-connector"

old_target=$(readlink "$root/current")
old_release=$(basename "$old_target")
old_previous=$(readlink "$root/previous" 2>/dev/null || true)
[ "$old_release" != "$release" ] || refuse "$release is already the current version"

switch() { # NAME TARGET: atomic symlink replacement
    ln -sfn "$2" "$root/.$1.tmp"
    mv -T "$root/.$1.tmp" "$root/$1"
}

healthy_within() {
    local deadline=$((SECONDS + health_timeout))
    while [ $SECONDS -lt $deadline ]; do
        if bash -c "$health" >/dev/null 2>&1; then
            return 0
        fi
        sleep 1
    done
    return 1
}

switch previous "$old_target"
switch current "releases/$release"
say "switched to $release (previous $old_release); restarting"
bash -c "$restart" >&2 || say "restart command failed"
if healthy_within; then
    say "updated to $release"
    exit 0
fi

say "$release did not become healthy within ${health_timeout}s; rolling back to $old_release"
switch current "$old_target"
if [ -n "$old_previous" ]; then switch previous "$old_previous"; else rm -f "$root/previous"; fi
bash -c "$restart" >&2 || say "restart command failed"
if healthy_within; then
    say "rolled back to $old_release"
    exit 3
fi
say "rollback to $old_release done but it is not healthy either"
exit 4
