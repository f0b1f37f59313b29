#!/usr/bin/env bash
# scripts/check_format on a planted tree: a file off the style fails the
# check and is named; the same file after --fix passes.
# Usage: check_format_test.sh REPOSITORY_ROOT
set -euo pipefail
repo=$1
command -v clang-format-14 >/dev/null || exit 77
tmp=$(mktemp -d /tmp/sinkrt-format.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "check_format_test: $*" >&2; exit 1; }

cp "$repo/.clang-format" "$tmp/"
mkdir -p "$tmp/host/src"
printf 'int  Sum(int a,int b){return a+b;}\n' > "$tmp/host/src/planted.cc"
printf 'int Fine(int a) { return a; }\n' > "$tmp/host/src/fine.cc"

if out=$("$repo/scripts/check_format" --root "$tmp" 2>&1); then fail "a misformatted file passed: $out"; fi
grep -q 'host/src/planted.cc' <<<"$out" || fail "the failure does not name host/src/planted.cc: $out"
if grep -q 'host/src/fine.cc' <<<"$out"; then fail "a formatted file was named: $out"; fi

"$repo/scripts/check_format" --fix --root "$tmp" >/dev/null
out=$("$repo/scripts/check_format" --root "$tmp" 2>&1) || fail "the tree still fails after --fix: $out"
echo "check_format_test: planted file caught and fixed"
