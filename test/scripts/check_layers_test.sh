#!/usr/bin/env bash
# scripts/check_layers on a copy of the checked trees: the copy passes, and
# each violation planted into it fails the check, named by file and line.
# Usage: check_layers_test.sh REPOSITORY_ROOT
set -euo pipefail
repo=$1
tmp=$(mktemp -d /tmp/sinkrt-layers.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

for tree in include runtime device host cli tools examples test; do
  cp -r "$repo/$tree" "$tmp/$tree"
done
check() { /usr/bin/python3 "$repo/scripts/check_layers" --root "$tmp"; }

fail() { echo "check_layers_test: $*" >&2; exit 1; }

# The copy as it is passes.
check >/dev/null || fail "the unchanged copy does not pass"

# Appends an include to FILE and echoes the line it landed on.
plant() {
  echo "#include \"$2\"" >>"$tmp/$1"
  wc -l <"$tmp/$1"
}
graph_line=$(plant host/src/graph/graph.cc host/src/model/model_impl.h)
device_line=$(plant device/src/executor.cc sinkrt/host/graph.h)
tools_line=$(plant tools/sinkc.cc host/src/job/manifest.h)
bare_line=$(plant host/src/parallel/parallel_context.cc tensor_layout/layout.h)
test_line=$(plant test/host/passes/amp_test.cc ../../../host/src/util/hex.h)
# device/src's headers are spelled from the root too, in device/ and in tests.
device_bare_line=$(plant device/src/daemon/daemon.cc executor.h)
test_device_line=$(plant test/device/comm/comm_test.cc comm/algorithms/reduce.h)
# A public header may include public headers only: the internal ones are not installed.
public_line=$(plant runtime/include/sinkrt/runtime/device_link.h runtime/src/wire.h)
mkdir "$tmp/host/src/newroom" && echo 'int x;' >"$tmp/host/src/newroom/x.cc"

set +e
out=$(check 2>&1)
rc=$?
set -e
echo "$out"
[[ $rc -eq 1 ]] || fail "exit status $rc with planted violations, expected 1"
expect() { grep -qxF -- "$1" <<<"$out" || fail "missing: $1"; }
expect "host/src/graph/graph.cc:$graph_line: room host/src/graph/ may not include room host/src/model/ (host/src/model/model_impl.h)"
expect "device/src/executor.cc:$device_line: room device/ may not include room host/include/ (sinkrt/host/graph.h)"
expect "tools/sinkc.cc:$tools_line: room tools/ may not include room host/src/job/ (host/src/job/manifest.h)"
expect "host/src/parallel/parallel_context.cc:$bare_line: include host/src headers by their path from the repository root (\"host/src/parallel/tensor_layout/layout.h\", not \"tensor_layout/layout.h\")"
expect "test/host/passes/amp_test.cc:$test_line: include host/src headers by their path from the repository root (\"host/src/util/hex.h\", not \"../../../host/src/util/hex.h\")"
expect "device/src/daemon/daemon.cc:$device_bare_line: include device/src headers by their path from the repository root (\"device/src/executor.h\", not \"executor.h\")"
expect "test/device/comm/comm_test.cc:$test_device_line: include device/src headers by their path from the repository root (\"device/src/comm/algorithms/reduce.h\", not \"comm/algorithms/reduce.h\")"
expect "runtime/include/sinkrt/runtime/device_link.h:$public_line: room runtime/include/ may not include room runtime/ (runtime/src/wire.h)"
expect "host/src/newroom/x.cc:1: lies in no room of host/src/README.md"
[[ $(grep -c ':[0-9]*: ' <<<"$out") -eq 9 ]] || fail "expected exactly the 9 planted violations"
echo "check_layers_test: every planted violation was found"
