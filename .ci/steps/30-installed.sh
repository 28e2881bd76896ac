#!/usr/bin/env bash
# Installed: `meson install` of ./build into a staging directory (DESTDIR), then a consumer in a
# directory without c128.cuh, compiled by nvcc with nothing but `pkg-config --cflags c128`.
# c128.pc says prefix=/usr/local, so a staged tree is found the way pkg-config supports it:
# PKG_CONFIG_SYSROOT_DIR = the staging directory. A second install into a prefix of its own
# (--prefix, as a user installing to ~/.local would) needs only PKG_CONFIG_PATH.
source "$(dirname "$0")/common.bash"
build=${C128_BUILD_DIR:-build}
[ -f "$build/build.ninja" ] || fail "$build is not configured: run .ci/setup first"

# The consumer: examples/subproject's program, without any header beside it.
mkdir "$scratch/app"
cp examples/subproject/app.cu examples/subproject/impl.cu "$scratch/app"
consumer() { # consumer NAME: build and run against the c128 that pkg-config finds now
  local cflags
  cflags=$(pkg-config --cflags c128) || fail "pkg-config finds no c128 ($1)"
  [[ $cflags == *"$scratch/"* ]] || fail "pkg-config --cflags c128 is '$cflags', outside the install ($1)"
  [ "$(pkg-config --modversion c128)" = "$(meson introspect "$build" --projectinfo | python3 -c \
    'import json, sys; print(json.load(sys.stdin)["version"])')" ] || fail "c128.pc has the wrong version ($1)"
  (
    cd "$scratch/app"
    # shellcheck disable=SC2086 # pkg-config output is a list of flags
    q nvcc -O2 -gencode arch=compute_90,code=sm_90 $cflags app.cu impl.cu -o "app_$1"
    q "./app_$1"
    grep -q ': ok$' "$scratch/log" || fail "app_$1 printed: $(cat "$scratch/log")"
  )
}

# 1. DESTDIR staging from ./build (what CI built); nothing is compiled by the install.
q meson install -C "$build" --destdir "$scratch/stage" --no-rebuild
pc=$(find "$scratch/stage" -name c128.pc)
[ -n "$pc" ] || fail "meson install staged no c128.pc"
[ -f "$(find "$scratch/stage" -name c128.cuh)" ] || fail "meson install staged no c128.cuh"
PKG_CONFIG_PATH=$(dirname "$pc") PKG_CONFIG_SYSROOT_DIR=$scratch/stage consumer destdir

# 2. A prefix of its own: configure only (the install needs no compiled target).
q meson setup "$scratch/build" --prefix="$scratch/prefix" -Dexamples=false -Dtests=disabled
q meson install -C "$scratch/build" --no-rebuild
pc=$(find "$scratch/prefix" -name c128.pc)
[ -n "$pc" ] || fail "meson install --prefix installed no c128.pc"
PKG_CONFIG_PATH=$(dirname "$pc") consumer prefix
ok
