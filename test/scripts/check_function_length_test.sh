#!/usr/bin/env bash
# scripts/check_function_length on a planted tree: a function of 151 lines
# fails the check, named by file, line and length; one of 150 passes, as do
# a long brace-initialised table, a long lambda assigned at namespace scope
# and braces inside comments and strings.
# Usage: check_function_length_test.sh REPOSITORY_ROOT
set -euo pipefail
repo=$1
tmp=$(mktemp -d /tmp/sinkrt-fnlen.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "check_function_length_test: $*" >&2; exit 1; }
check() { /usr/bin/python3 "$repo/scripts/check_function_length" --root "$tmp" host; }

mkdir -p "$tmp/host/src"
# A function whose signature, body and closing brace take $2 lines.
function_of() {
  echo "int $1(int x) {"
  for ((i = 0; i < $2 - 3; ++i)); do echo "  x += $i;  // { not a brace"; done
  echo '  return x + "}"[0];'
  echo "}"
}
{
  echo 'namespace a {'
  function_of Fits 150
  echo 'const int kTable[] = {'
  for ((i = 0; i < 200; ++i)); do echo "  $i,"; done
  echo '};'
  echo 'auto kLambda = [](int x) {'
  for ((i = 0; i < 200; ++i)); do echo "  x += $i;"; done
  echo '  return x;'
  echo '};'
  echo '}  // namespace a'
} >"$tmp/host/src/ok.cc"
check >/dev/null || fail "a tree without long functions does not pass"

{
  echo 'namespace a {'
  echo 'struct S {'
  function_of TooLong 151
  echo '};'
  echo '}  // namespace a'
} >"$tmp/host/src/long.cc"
set +e
out=$(check 2>&1)
rc=$?
set -e
echo "$out"
[[ $rc -eq 1 ]] || fail "exit status $rc with a planted 151-line function, expected 1"
grep -qxF "host/src/long.cc:3: TooLong is 151 lines (threshold 150)" <<<"$out" || fail "the planted function is not named"
[[ $(grep -c ':[0-9]*: ' <<<"$out") -eq 1 ]] || fail "expected exactly the planted function"
echo "check_function_length_test: the planted function was found"
