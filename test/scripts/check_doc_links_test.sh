#!/usr/bin/env bash
# scripts/check_doc_links on a copy of the pages and the code that names
# them: the copy passes, and each break planted into it fails the check,
# named by file and line.
# Usage: check_doc_links_test.sh REPOSITORY_ROOT
set -euo pipefail
repo=$1
tmp=$(mktemp -d /tmp/sinkrt-doclinks.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

cp "$repo/README.md" "$tmp/"
for tree in docs bench host device runtime tools cli scripts examples cmake; do
  cp -r "$repo/$tree" "$tmp/$tree"
done
check() { /usr/bin/python3 "$repo/scripts/check_doc_links" "$tmp"; }
fail() { echo "check_doc_links_test: $*" >&2; exit 1; }

# The copy as it is passes.
check >/dev/null || fail "the unchanged copy does not pass"

# Appends LINE to FILE and echoes the line number it landed on.
plant() {
  echo "$2" >>"$tmp/$1"
  wc -l <"$tmp/$1"
}
# (The old pages' names are spelt with a variable, so that this file does not
# name them itself.)
amp=amp compiler=compiler
missing_line=$(plant docs/guide/training.md "See [the old page](../$amp.md).")
anchor_line=$(plant docs/README.md 'See [flags](reference/cli.md#no-such-section).')
own_line=$(plant README.md 'See [above](#no-such-heading).')
code_line=$(plant host/src/compiler/lowering.h "// docs/$compiler.md says why.")

set +e
out=$(check 2>&1)
rc=$?
set -e
echo "$out"
[[ $rc -eq 1 ]] || fail "exit status $rc with planted breaks, expected 1"
expect() { grep -qxF -- "$1" <<<"$out" || fail "missing: $1"; }
expect "docs/guide/training.md:$missing_line: link to ../$amp.md: docs/$amp.md does not exist"
expect "docs/README.md:$anchor_line: link to reference/cli.md#no-such-section: no heading \"#no-such-section\" in docs/reference/cli.md"
expect "README.md:$own_line: link to #no-such-heading: no heading \"#no-such-heading\" in README.md"
expect "host/src/compiler/lowering.h:$code_line: names docs/$compiler.md, which does not exist (moved to docs/design/$compiler.md)"
echo "check_doc_links_test: the copy passes; each of the 4 planted breaks fails it"
