#!/usr/bin/env bash
# Meson subproject: examples/subproject is a consumer project whose subprojects/c128.wrap is the
# real one (wrap-git with [provide] dependency_names = c128). CI has no network, so the step
# does what a user without network would do: put a c128 checkout at subprojects/c128 (here a
# link to this working tree); Meson then uses that directory as it is and downloads nothing
# (--wrap-mode=nodownload makes sure). dependency('c128') must resolve through the wrap's
# [provide] to the dependency that c128's meson.build overrides; the consumer is built and its
# test run.
source "$(dirname "$0")/common.bash"
repo=$PWD
cp -r examples/subproject/. "$scratch/consumer"
ln -s "$repo" "$scratch/consumer/subprojects/c128"
cd "$scratch/consumer"
q meson setup build --wrap-mode=nodownload
grep -q 'Dependency c128 found: YES .*(overridden)' build/meson-logs/meson-log.txt ||
  fail "dependency('c128') was not the subproject's override"
q meson compile -C build
q meson test -C build --print-errorlogs
q ./build/app
grep -q ': ok$' "$scratch/log" || fail "app printed: $(cat "$scratch/log")"
ok
