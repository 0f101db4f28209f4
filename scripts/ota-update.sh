#!/usr/bin/env bash
# Over-the-air update of opex-connector, A/B with automatic rollback.
#
# Usage:
#   scripts/ota-update.sh --artifact URL|FILE --manifest URL|FILE [options]
#
# Options (defaults in brackets):
#   --manifest-sig URL|FILE  the manifest's ed25519 signature [the manifest's URL + .sig]
#   --allow-downgrade     install a version that is not newer than the running one
#   --root DIR            install root [/opt/opex-connector]; layout:
#                         DIR/releases/<version>-<sha8>/opex-connector, DIR/current and
#                         DIR/previous are symlinks to release folders
#   --pubkey FILE         ed25519 public key, hex [/etc/opex-connector/release.pub]
#   --board FILE          this board's profile, for its target triple
#                         [/etc/opex-connector/board.yaml, written by scripts/install.sh]
#   --target TRIPLE       this board's target triple [`target:` of --board]
#   --config FILE         config the new binary must accept [/etc/opex-connector/config.yaml]
#   --restart CMD         how to restart the service [systemctl restart opex-connector]
#   --health CMD          succeeds once the service is healthy; runs with
#                         OPEX_EXPECTED_VERSION set to the version that should answer
#                         [GET STATUS_URL: connector.healthy true and connector.version
#                         the expected one, checked by `opex-connector check-status`]
#   --status-url URL      for the default health check [http://127.0.0.1:8080/api/status]
#   --health-timeout SECS how long the new version has to become healthy [60]
#
# Steps: fetch the artifact, its manifest and the manifest's signature. The RUNNING binary
# (trusted, unlike the new one) checks them with `verify-manifest`: the signature over the
# manifest, the artifact's SHA-256 against the manifest's, the manifest's target against
# this board's, its not_after against the clock, and its version against the running one
# (it must be newer unless --allow-downgrade). The new binary must report the manifest's
# version and validate the current config. Then it is installed beside the current one, the
# `current` symlink switches atomically, the service restarts, and the health check must see
# the new version healthy. If it does not in time, the script switches back, restarts the
# old one, waits for the old version to be healthy, and says so.
# The data dir and the config are never touched.
#
# Exit codes: 0 updated; 2 refused (nothing changed); 3 rolled back to the old version;
# 4 rollback failed too (the old version is installed but not healthy: look at the box).
set -euo pipefail

root=/opt/opex-connector
pubkey=/etc/opex-connector/release.pub
board=/etc/opex-connector/board.yaml
target=""
config=/etc/opex-connector/config.yaml
restart="systemctl restart opex-connector"
status_url=http://127.0.0.1:8080/api/status
health=""
health_timeout=60
artifact=""
manifest=""
manifest_sig=""
allow_downgrade=0

say() { echo "ota-update: $*" >&2; }
refuse() {
    say "refused: $*"
    exit 2
}

while [ $# -gt 0 ]; do
    case "$1" in
        --artifact) artifact="$2"; shift 2 ;;
        --manifest) manifest="$2"; shift 2 ;;
        --manifest-sig) manifest_sig="$2"; shift 2 ;;
        --allow-downgrade) allow_downgrade=1; shift ;;
        --root) root="$2"; shift 2 ;;
        --pubkey) pubkey="$2"; shift 2 ;;
        --board) board="$2"; shift 2 ;;
        --target) target="$2"; shift 2 ;;
        --config) config="$2"; shift 2 ;;
        --restart) restart="$2"; shift 2 ;;
        --health) health="$2"; shift 2 ;;
        --status-url) status_url="$2"; shift 2 ;;
        --health-timeout) health_timeout="$2"; shift 2 ;;
        -h | --help)
            sed -n '2,38p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *) refuse "unknown argument $1" ;;
    esac
done
if [ -z "$artifact" ] || [ -z "$manifest" ]; then
    refuse "--artifact and --manifest are required"
fi
[ -n "$manifest_sig" ] || manifest_sig="$manifest.sig"
if [ -z "$target" ]; then
    [ -r "$board" ] || refuse "no board profile at $board: give --board FILE or --target TRIPLE"
    target=$(sed -n 's/^target: *//p' "$board" | head -n1)
    [ -n "$target" ] || refuse "$board names no target"
fi

current_bin="$root/current/opex-connector"
[ -x "$current_bin" ] || refuse "no installed version at $root/current (use scripts/install.sh first)"
[ -r "$pubkey" ] || refuse "public key $pubkey not readable"
# The old release by its own path: it checks the new one's health after the switch too.
old_target=$(readlink "$root/current")
old_release=$(basename "$old_target")
old_dir=$(cd "$root" && cd "$old_target" && pwd) || refuse "$root/current points to $old_target, which is not there"
old_bin="$old_dir/opex-connector"
running_version=$("$old_bin" --version 2>/dev/null | head -n1 | awk '{print $2}') || true
[ -n "$running_version" ] || refuse "the installed version at $root/current does not run"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fetch() { # SRC DEST
    case "$1" in
        http://* | https://*) curl -sfL --max-time 600 -o "$2" "$1" ;;
        *) cp -- "$1" "$2" ;;
    esac
}

fetch "$artifact" "$work/opex-connector" || refuse "cannot fetch $artifact"
fetch "$manifest" "$work/manifest.json" || refuse "cannot fetch $manifest"
fetch "$manifest_sig" "$work/manifest.json.sig" || refuse "cannot fetch $manifest_sig"

verify_args=(--target "$target" --sig "$work/manifest.json.sig" --running "$running_version")
((!allow_downgrade)) || verify_args+=(--allow-downgrade)
rc=0
checked=$("$old_bin" verify-manifest "$work/manifest.json" "$work/opex-connector" "$pubkey" \
    "${verify_args[@]}" 2>"$work/verify.err") || rc=$?
case $rc in
    0) ;;
    1) refuse "$(sed 's/^.*refused: //' "$work/verify.err")" ;;
    *) refuse "the installed version $running_version cannot check manifests (verify-manifest exits $rc)" ;;
esac
new_version=$(sed -n 's/^version=//p' <<<"$checked")
sha=$(sed -n 's/^sha256=//p' <<<"$checked")
if [ -z "$new_version" ] || [ -z "$sha" ]; then
    refuse "verify-manifest printed no version and sha256"
fi

chmod 0755 "$work/opex-connector"
reported=$("$work/opex-connector" --version 2>/dev/null | head -n1 | awk '{print $2}') || true
[ -n "$reported" ] || refuse "the new binary does not run here (wrong architecture?)"
[ "$reported" = "$new_version" ] ||
    refuse "the new binary reports version $reported, its manifest says $new_version"
"$work/opex-connector" validate "$config" >&2 || refuse "the new version $new_version rejects $config"

release="$new_version-${sha:0:8}"
[ "$old_release" != "$release" ] || refuse "$release is already the current version"
mkdir -p "$root/releases/$release"
install -m 0755 "$work/opex-connector" "$root/releases/$release/opex-connector"
old_previous=$(readlink "$root/previous" 2>/dev/null || true)

switch() { # NAME TARGET: atomic symlink replacement
    ln -sfn "$2" "$root/.$1.tmp"
    mv -T "$root/.$1.tmp" "$root/$1"
}

healthy() { # VERSION: the service answers as that version, healthy
    if [ -n "$health" ]; then
        OPEX_EXPECTED_VERSION="$1" bash -c "$health"
    else
        curl -sf --max-time 5 "$status_url" | "$old_bin" check-status "$1"
    fi
}

last_check=""
healthy_within() { # VERSION
    local deadline=$((SECONDS + health_timeout))
    while [ $SECONDS -lt $deadline ]; do
        if last_check=$(healthy "$1" 2>&1); then
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
if healthy_within "$new_version"; then
    say "updated to $release"
    exit 0
fi

say "$release did not become healthy within ${health_timeout}s (${last_check:-no answer}); rolling back to $old_release"
switch current "$old_target"
if [ -n "$old_previous" ]; then switch previous "$old_previous"; else rm -f "$root/previous"; fi
bash -c "$restart" >&2 || say "restart command failed"
if healthy_within "$running_version"; then
    say "rolled back to $old_release"
    exit 3
fi
say "rollback to $old_release done but it is not healthy either (${last_check:-no answer})"
exit 4
