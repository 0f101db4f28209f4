#!/usr/bin/env bash
# Release binaries for the boards: stripped, size-tuned (see [profile.release]), with
# SHA256SUMS, under dist/ as opex-connector-<version>-<target>, and beside them the man page
# opex-connector-<version>.1 (man/opex-connector.1, written from the command table) and the
# config schema opex-connector.schema.json (config/, written from the config types).
#
# Usage: scripts/build-release.sh [--sign KEY [--valid-for DURATION]]
#                                 [--no-opcua | --with-opcua-server | --with-simulator] [--stable] [--opt-level L] [--bloat N] [TARGET...]
#   TARGET defaults to: aarch64-unknown-linux-gnu aarch64-unknown-linux-musl
#                       armv7-unknown-linux-gnueabihf x86_64-unknown-linux-musl
#   The boards' targets (aarch64 and armv7, gnu and musl) get the small build, what a site
#   flashes: opt-level "z" and the standard library compiled with the build (cargo's
#   -Z build-std on the nightly pinned below, NIGHTLY, installed with its rust-src when
#   missing; panic = "abort", no unwind tables, LTO with the rest): about 2.8 MB smaller than
#   the stable build, its code about 3 times slower (docs/src/deployment/build-size.md).
#   Panic messages stay, backtraces go. It builds with the local toolchains (not cross).
#   x86_64-unknown-linux-musl, an industrial PC with room to spare, gets the stable build.
#   --sign KEY          also write <artifact>.manifest.json (version, target, sha256,
#                       not_after) and its ed25519 signature <artifact>.manifest.json.sig,
#                       what scripts/ota-update.sh installs (`opex-connector keygen` makes KEY)
#   --valid-for D       how long a box may install it: not_after is now + D [90d; at most 366d]
#   The field build has every source and sink, OPC-UA included, but not the simulator's
#   OPC-UA server (about 6 MB of address space; the Modbus simulator stays). Every artifact
#   is built with the no-debug-logs feature: no debug or trace lines (about 160 KB; info
#   and above stay). Instead of the field build:
#   --no-opcua          the smallest build, without OPC-UA: <artifact>-no-opcua
#   --with-opcua-server the field build and the northbound OPC-UA server (opcua_server:):
#                       <artifact>-with-opcua-server
#   --with-simulator    everything, like `cargo build --release`: <artifact>-with-simulator
#   --stable            the stable build for every target: stable Rust, [profile.release]'s
#                       opt-level "s", the prebuilt standard library: <artifact>-stable on
#                       the boards' targets
#   --opt-level L       build with opt-level L instead of the target's ("z" small, "s"
#                       stable): <artifact>-opt-L
#   --bloat N           also print the N biggest crates of each build (cargo-bloat, installed
#                       here when missing, pinned), weighed on that build's unstripped link
#
# With a container engine and `cross` on PATH it uses `cross build` (cross/Cross.toml).
# Without: cargo with Debian's cross linkers (installed here when missing) and, for
# aarch64-unknown-linux-musl (no Debian cross gcc for musl), cargo-zigbuild with zig from
# PyPI. Honours CARGO_TARGET_DIR.
set -euo pipefail

ZIG_VERSION=0.13.0
ZIGBUILD_VERSION=0.19.8
BLOAT_VERSION=0.12.1
# The nightly that the small build uses, and its rustc's commit (a toolchain named `nightly`
# counts when its rustc is this one). -Z build-std is unstable: move both together and
# measure again (docs/src/deployment/build-size.md).
NIGHTLY="nightly-2026-05-20"
NIGHTLY_COMMIT=e50aa6fba

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
target_dir="${CARGO_TARGET_DIR:-$repo/target}"
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
sign_key=""
valid_for=90d
features=(--no-default-features --features "opcua s7 no-debug-logs")
suffix=""
bloat=0
stable=0
opt_level=""
targets=()
while [ $# -gt 0 ]; do
    case "$1" in
        --sign) sign_key="$2"; shift 2 ;;
        --valid-for) valid_for="$2"; shift 2 ;;
        --no-opcua) features=(--no-default-features --features "s7 no-debug-logs"); suffix="-no-opcua"; shift ;;
        --with-opcua-server)
            features=(--no-default-features --features "opcua opcua-server s7 no-debug-logs")
            suffix="-with-opcua-server"
            shift
            ;;
        --with-simulator) features=(--features no-debug-logs); suffix="-with-simulator"; shift ;;
        --bloat) bloat="$2"; shift 2 ;;
        --opt-level) opt_level="$2"; shift 2 ;;
        --stable) stable=1; shift ;;
        -h | --help)
            sed -n '2,/^set /{/^#/p}' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        -*) printf 'build-release.sh: unknown option %s (see --help)\n' "$1" >&2; exit 2 ;;
        *) targets+=("$1"); shift ;;
    esac
done
((${#targets[@]})) || targets=(aarch64-unknown-linux-gnu aarch64-unknown-linux-musl
    armv7-unknown-linux-gnueabihf x86_64-unknown-linux-musl)

# True for a board's target (aarch64 and armv7, gnu and musl).
board() { # TARGET
    case "$1" in
        aarch64-unknown-linux-gnu | aarch64-unknown-linux-musl | armv7-unknown-linux-gnueabihf) return 0 ;;
        *) return 1 ;;
    esac
}

# True when TARGET gets the small build: a board's, without --stable.
small() { # TARGET
    ((!stable)) && board "$1"
}

# TARGET's artifact name. A build made another way than the target's own is named so: it
# never replaces the default artifact in dist/, and a technician can tell which one a box
# runs.
artifact() { # TARGET
    local name="opex-connector-$version-$1$suffix" own=s
    if small "$1"; then
        own=z
    elif board "$1"; then
        name+="-stable"
    fi
    [ -z "$opt_level" ] || [ "$opt_level" = "$own" ] || name+="-opt-$opt_level"
    printf '%s' "$name"
}

log() { printf '==> %s\n' "$*" >&2; }

apt_updated=0
apt_install() {
    local missing=() pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
    done
    ((${#missing[@]})) || return 0
    if ((!apt_updated)); then
        apt-get update -qq
        apt_updated=1
    fi
    log "apt-get install ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

die() {
    printf 'build-release.sh: %s\n' "$*" >&2
    exit 1
}

use_cross=0
if command -v cross >/dev/null && { docker info >/dev/null 2>&1 || podman info >/dev/null 2>&1; }; then
    use_cross=1
fi

# The small build: cargo runs as "${cargo[@]}" (cargo +NIGHTLY) with "${std_flags[@]}"
# added to its build; the stable one as plain cargo with no flags (set per target below).
# The nightly is the pinned one: a toolchain named $NIGHTLY, or one named `nightly` whose
# rustc is $NIGHTLY_COMMIT, else $NIGHTLY is installed. std's sources come from its
# rust-src; the target's prebuilt std is not needed.
any_small=0
for t in "${targets[@]}"; do
    if small "$t"; then any_small=1; fi
done
nightly=""
small_flags=()
if ((any_small)); then
    host=$(rustc -vV | sed -n 's/^host: //p')
    for tc in "$NIGHTLY" nightly; do
        rustup toolchain list | grep -q "^$tc-$host\b" || continue
        if rustc "+$tc" -V | grep -q "($NIGHTLY_COMMIT "; then
            nightly="$tc"
            break
        fi
    done
    if [ -z "$nightly" ]; then
        log "rustup toolchain install $NIGHTLY --profile minimal --component rust-src"
        rustup toolchain install "$NIGHTLY" --profile minimal --component rust-src ||
            die "the small build needs the nightly toolchain $NIGHTLY (rustc $NIGHTLY_COMMIT) with rust-src, and installing it failed; install it (rustup toolchain install $NIGHTLY --component rust-src) or build with --stable"
        nightly="$NIGHTLY"
    fi
    if ! rustup component list --installed --toolchain "$nightly" | grep -qx rust-src; then
        rustup component add rust-src --toolchain "$nightly" ||
            die "the small build needs rust-src of $nightly, and adding it failed (rustup component add rust-src --toolchain $nightly)"
    fi
    log "the small build with $(rustc "+$nightly" -V)"
    # std's features: optimize_for_size (its smaller sort and string algorithms), and not
    # cargo's default `backtrace`, the symbolizer (gimli, addr2line, miniz_oxide) that reads
    # the debug info and symbols a stripped binary does not have. A panic still prints its
    # message and location.
    small_flags=(-Z "build-std=std,panic_abort" -Z build-std-features=optimize_for_size)
fi

# Source paths as a panic's location names them, without the directories of the machine that
# built it: `<cargo home>/registry/src/<index>/tokio-1.54.1/src/...` becomes
# `tokio-1.54.1/src/...` (this package's own are `src/...` already), and in the small build the
# nightly's `.../lib/rustlib/src/rust/library/...` becomes `library/...`. 731 paths, 69 632
# bytes of the aarch64 musl small build (about 56 KB of the
# stable one), and no builder's home directory in the artifact. A path with white space in it
# is left as it is (the flags are split on white space).
remaps=()
for dir in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/; do
    [ -d "$dir" ] && [[ "$dir" != *[[:space:]]* ]] && remaps+=("--remap-path-prefix=$dir=")
done
if ((any_small)); then
    std_src="$(rustc "+$nightly" --print sysroot)/lib/rustlib/src/rust/"
    [[ "$std_src" != *[[:space:]]* ]] && remaps+=("--remap-path-prefix=$std_src=")
fi

# Local builds link unstripped (CARGO_PROFILE_RELEASE_STRIP=false, what cargo-bloat builds
# too, so --bloat weighs this very build instead of compiling everything again) and strip the
# copy in dist/ with the target's binutils: strip_tool names it, empty when cross stripped.
strip_tool=""
build() { # TARGET
    local t="$1"
    if ((use_cross)) && ! small "$t"; then
        log "cross build --release --target $t"
        CROSS_CONFIG=cross/Cross.toml cross build --release "${features[@]}" --target "$t"
        strip_tool=""
        return
    fi
    # (The small build compiles the target's std from source.)
    small "$t" || rustup target list --installed | grep -qx "$t" || rustup target add "$t"
    case "$t" in
        aarch64-unknown-linux-gnu)
            apt_install gcc-aarch64-linux-gnu libc6-dev-arm64-cross
            strip_tool=aarch64-linux-gnu-strip
            ;;
        armv7-unknown-linux-gnueabihf)
            apt_install gcc-arm-linux-gnueabihf libc6-dev-armhf-cross
            strip_tool=arm-linux-gnueabihf-strip
            ;;
        x86_64-unknown-linux-musl)
            apt_install musl-tools binutils
            strip_tool="strip"
            ;;
        aarch64-unknown-linux-musl)
            apt_install binutils-aarch64-linux-gnu
            strip_tool=aarch64-linux-gnu-strip
            python3 -m pip show ziglang >/dev/null 2>&1 ||
                python3 -m pip install --quiet --root-user-action=ignore "ziglang==$ZIG_VERSION"
            command -v cargo-zigbuild >/dev/null ||
                cargo install --quiet --locked "cargo-zigbuild@$ZIGBUILD_VERSION"
            log "${cargo[*]} zigbuild --release ${std_flags[*]} --target $t"
            CARGO_PROFILE_RELEASE_STRIP=false "${cargo[@]}" zigbuild --release "${std_flags[@]}" \
                "${features[@]}" --target "$t"
            return
            ;;
    esac
    log "${cargo[*]} build --release ${std_flags[*]} --target $t"
    CARGO_PROFILE_RELEASE_STRIP=false "${cargo[@]}" build --release "${std_flags[@]}" "${features[@]}" \
        --config cross/cargo-config.toml --target "$t"
}

# cargo-bloat's table of the biggest crates in TARGET's build, after build(): cargo-bloat runs
# `cargo build` itself with CARGO_PROFILE_RELEASE_STRIP=false, which finds build()'s output up
# to date; for the zig-linked target a `cargo` first on its PATH makes that `cargo zigbuild`.
# (With cross, build() stripped: this then builds once more with the local toolchain.)
bloat_table() { # TARGET
    local t="$1" real shim
    cargo bloat --version 2>/dev/null | grep -qx "cargo-bloat $BLOAT_VERSION" ||
        cargo install --quiet --locked "cargo-bloat@$BLOAT_VERSION"
    log "cargo bloat --release --target $t --crates -n $bloat"
    case "$t" in
        aarch64-unknown-linux-musl)
            real="$(command -v cargo)"
            shim="$target_dir/bloat-shim"
            mkdir -p "$shim"
            # shellcheck disable=SC2016 # the shim's own "$1" and "$@"
            printf '#!/bin/sh\nif [ "$1" = build ]; then shift; exec "%s" zigbuild "$@"; fi\nexec "%s" "$@"\n' \
                "$real" "$real" >"$shim/cargo"
            chmod +x "$shim/cargo"
            PATH="$shim:$PATH" "${cargo[@]}" bloat --release "${std_flags[@]}" "${features[@]}" \
                --target "$t" --bin opex-connector --crates -n "$bloat"
            ;;
        *)
            "${cargo[@]}" bloat --release "${std_flags[@]}" "${features[@]}" \
                --config cross/cargo-config.toml --target "$t" --bin opex-connector --crates -n "$bloat"
            ;;
    esac
}

signer=""
if [ -n "$sign_key" ]; then
    # The artifacts are for other machines: sign with a build for this one.
    cargo build --release
    signer="$target_dir/release/opex-connector"
fi
mkdir -p dist
artifacts=()
for t in "${targets[@]}"; do
    # No unwind tables (.eh_frame): with panic = "abort" nothing unwinds, and a panic's
    # backtrace in a stripped binary has no names anyway. 262 KB of the aarch64 musl field
    # build (docs/src/deployment/build-size.md).
    # (RUSTFLAGS, when set, replaces this.)
    rustflags=-Cforce-unwind-tables=no
    if small "$t"; then
        cargo=(cargo "+$nightly")
        std_flags=("${small_flags[@]}")
        export CARGO_PROFILE_RELEASE_OPT_LEVEL="${opt_level:-z}"
        # A std built here has no musl start files (crt1.o and the like) for rustc to
        # pass: zig links its own musl, start files and libunwind instead.
        [[ "$t" != *-musl ]] || rustflags+=" -Clink-self-contained=no"
        # armv7: Thumb-2 code (16- and 32-bit instructions) instead of A32, std included:
        # every ARMv7-A core runs it, and the build's code is about a quarter smaller.
        [[ "$t" != armv7-* ]] || rustflags+=" -Ctarget-feature=+thumb-mode"
        ((!use_cross)) || log "the small build of $t builds with the local toolchain, not cross"
    else
        cargo=(cargo)
        std_flags=()
        export CARGO_PROFILE_RELEASE_OPT_LEVEL="${opt_level:-s}"
    fi
    # A board's gnu target in the small build: linked by the nightly's own lld (through
    # Debian's gcc driver) with the relative relocations of the position-independent
    # executable packed (DT_RELR) instead of 24 bytes each: 632 688 bytes of .rela.dyn in
    # the aarch64 gnu build. Debian 12's ld ignores the option for aarch64. It needs glibc
    # 2.36 on the box, as a build linked on Debian 12 does anyway (cross/cargo-config.toml).
    if small "$t" && [[ "$t" == *-gnu* ]]; then
        lld_dir="$(rustc "+$nightly" --print sysroot)/lib/rustlib/$host/bin/gcc-ld"
        [ -x "$lld_dir/ld.lld" ] || die "the small build links with the nightly's lld, and $lld_dir/ld.lld is missing"
        rustflags+=" -Clink-arg=-fuse-ld=lld -Clink-arg=-B$lld_dir -Clink-arg=-Wl,-z,pack-relative-relocs"
    fi
    rustflags+="${remaps[*]/#/ }"
    export "CARGO_TARGET_$(printf %s "$t" | tr 'a-z-' 'A-Z_')_RUSTFLAGS=$rustflags"
    build "$t"
    if ((bloat)); then bloat_table "$t"; fi
    out="$(artifact "$t")"
    cp "$target_dir/$t/release/opex-connector" "dist/$out"
    if [ -n "$strip_tool" ]; then "$strip_tool" --strip-all "dist/$out"; fi
    artifacts+=("$out")
    if [ -n "$signer" ]; then
        "$signer" sign-manifest "dist/$out" "$sign_key" "dist/$out.manifest.json" \
            --version "$version" --target "$t" --valid-for "$valid_for" >&2
    fi
done
# The man page and the config schema are the same for every target (`man -l
# opex-connector-<version>.1` reads the page; the schema is what the example configs' first
# line names, for editors).
cp man/opex-connector.1 "dist/opex-connector-$version.1"
cp config/opex-connector.schema.json dist/opex-connector.schema.json
artifacts+=("opex-connector-$version.1" opex-connector.schema.json)
# SHA256SUMS keeps the lines of artifacts built before (other targets, the other build) and
# replaces those of the artifacts built now.
(
    cd dist
    touch SHA256SUMS
    for a in "${artifacts[@]}"; do
        grep -v "  $a\$" SHA256SUMS >SHA256SUMS.new || true
        mv SHA256SUMS.new SHA256SUMS
    done
    sha256sum "${artifacts[@]}" >>SHA256SUMS
)

printf '\n%-64s %12s\n' "artifact" "bytes" >&2
for t in "${targets[@]}"; do
    f="dist/$(artifact "$t")"
    printf '%-64s %12s\n' "$(basename "$f")" "$(stat -c %s "$f")" >&2
done
