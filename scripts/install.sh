#!/usr/bin/env bash
# Installs opex-connector on a box, for one board profile of boards/.
#
# Usage:
#   scripts/install.sh --board rpi4 --config site.yaml [options]
#
# Options (defaults in brackets):
#   --board NAME      a profile in boards/ (rpi3, rpi4, rpi5, x86_64-ipc); required
#   --config FILE     the site config; the board's overlay is merged over it. Needed on the
#                     first install; later installs keep the config already in place
#   --binary FILE     the binary [dist/opex-connector-<version>-<board target>]
#   --root DIR        install root [/opt/opex-connector]: DIR/releases/<version>-<sha8>/,
#                     DIR/current (symlink), the layout scripts/ota-update.sh updates
#   --etc DIR         config folder [/etc/opex-connector]; the board profile is copied
#                     there as board.yaml (scripts/ota-update.sh reads its target)
#   --bin-dir DIR     where the `opex-connector` command is linked [/usr/local/bin]
#   --share DIR       where the man page (DIR/man/man1/opex-connector.1) and the shell
#                     completions (DIR/bash-completion/completions, DIR/zsh/site-functions,
#                     DIR/fish/vendor_completions.d) go [/usr/local/share]
#   --pubkey FILE     release public key for OTA updates, copied to --etc
#   --unit-dir DIR    where the systemd unit goes [/etc/systemd/system], with the
#                     board's DeviceAllow= lines in DIR/opex-connector.service.d/devices.conf
#   --no-start        install the unit but do not enable or start it (images, tests)
#   --no-systemd      do not install, enable and start the systemd unit
#   --no-user         do not create the `opex-connector` system user
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
board=""
site=""
binary=""
root=/opt/opex-connector
etc=/etc/opex-connector
bin_dir=/usr/local/bin
share=/usr/local/share
pubkey=""
unit_dir=/etc/systemd/system
start=1
systemd=1
user=1

say() { echo "install: $*" >&2; }
die() {
    say "$*"
    exit 1
}

while [ $# -gt 0 ]; do
    case "$1" in
        --board) board="$2"; shift 2 ;;
        --config) site="$2"; shift 2 ;;
        --binary) binary="$2"; shift 2 ;;
        --root) root="$2"; shift 2 ;;
        --etc) etc="$2"; shift 2 ;;
        --bin-dir) bin_dir="$2"; shift 2 ;;
        --share) share="$2"; shift 2 ;;
        --pubkey) pubkey="$2"; shift 2 ;;
        --unit-dir) unit_dir="$2"; shift 2 ;;
        --no-start) start=0; shift ;;
        --no-systemd) systemd=0; shift ;;
        --no-user) user=0; shift ;;
        -h | --help)
            sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *) die "unknown argument $1" ;;
    esac
done

profile="$repo/boards/$board.yaml"
if [ -z "$board" ] || [ ! -f "$profile" ]; then
    known=$(for f in "$repo"/boards/*.yaml; do basename "$f" .yaml; done | tr '\n' ' ')
    die "--board must name a profile in boards/: $known"
fi
target=$(sed -n 's/^target: *//p' "$profile")
# The `device_allow:` list of the profile, one entry a line, comments dropped.
devices=$(awk '/^device_allow:/ { on = 1; next } on && /^[^ #]/ { on = 0 }
    on { sub(/#.*/, ""); if ($1 == "-") print $2 }' "$profile")
[ -n "$devices" ] || die "$profile has no device_allow entries"
for d in $devices; do
    [[ "$d" =~ ^(char|block)-[A-Za-z0-9_*-]+$ || "$d" =~ ^/dev/[A-Za-z0-9_./:-]+$ ]] ||
        die "$profile: device_allow entry $d is not char-NAME, block-NAME or a /dev path"
done
data_dir=$(sed -n 's/^data_dir: *//p' "$profile")
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$repo/Cargo.toml" | head -n1)
[ -n "$binary" ] || binary="$repo/dist/opex-connector-$version-$target"
[ -x "$binary" ] || die "no binary at $binary (scripts/build-release.sh $target, or --binary)"

sha=$(sha256sum "$binary" | cut -d' ' -f1)
release="$version-${sha:0:8}"
mkdir -p "$root/releases/$release" "$etc" "$bin_dir"
install -m 0755 "$binary" "$root/releases/$release/opex-connector"
ln -sfn "releases/$release" "$root/.current.tmp"
mv -T "$root/.current.tmp" "$root/current"
ln -sfn "$root/current/opex-connector" "$bin_dir/opex-connector"
say "installed $release for $board ($target) in $root"
# The man page (written from the same command table as the binary's --help) and the
# completions, which the installed binary writes for itself.
install -D -m 0644 "$repo/man/opex-connector.1" "$share/man/man1/opex-connector.1"
for shell_dir in bash:bash-completion/completions/opex-connector zsh:zsh/site-functions/_opex-connector \
    fish:fish/vendor_completions.d/opex-connector.fish; do
    mkdir -p "$(dirname "$share/${shell_dir#*:}")"
    "$root/current/opex-connector" completions "${shell_dir%%:*}" >"$share/${shell_dir#*:}"
done
say "man page and bash, zsh and fish completions in $share"

if [ ! -f "$etc/config.yaml" ]; then
    [ -n "$site" ] || die "first install: give the site config with --config"
    merged=$(mktemp)
    "$root/current/opex-connector" overlay "$site" "$profile" >"$merged"
    install -m 0640 "$merged" "$etc/config.yaml"
    rm -f "$merged"
    say "wrote $etc/config.yaml (site config + $board overlay); data_dir for this board: $data_dir"
fi
"$root/current/opex-connector" validate "$etc/config.yaml" >&2 || die "$etc/config.yaml is not valid"
if [ -n "$pubkey" ]; then
    install -m 0644 "$pubkey" "$etc/release.pub"
fi
# The board this box is: scripts/ota-update.sh installs only builds for its target.
install -m 0644 "$profile" "$etc/board.yaml"

if [ "$user" = 1 ] && ! id opex-connector >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin opex-connector
    say "created the system user opex-connector"
fi
if [ "$user" = 1 ]; then
    chgrp opex-connector "$etc/config.yaml"
fi
if [ "$systemd" = 1 ]; then
    install -D -m 0644 "$repo/systemd/opex-connector.service" "$unit_dir/opex-connector.service"
    dropin=$(mktemp)
    {
        echo "# Written by scripts/install.sh from boards/$board.yaml (device_allow): the"
        echo "# devices the service may open besides /dev/null and the like, under the"
        echo "# unit's DevicePolicy=closed."
        echo "[Service]"
        for d in $devices; do echo "DeviceAllow=$d rw"; done
    } >"$dropin"
    install -D -m 0644 "$dropin" "$unit_dir/opex-connector.service.d/devices.conf"
    rm -f "$dropin"
    say "unit in $unit_dir, devices for $board: $(echo "$devices" | tr '\n' ' ')"
    if [ "$start" = 1 ]; then
        systemctl daemon-reload
        systemctl enable --now opex-connector
        say "service enabled and started: systemctl status opex-connector"
    fi
fi
