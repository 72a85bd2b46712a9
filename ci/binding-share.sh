#!/usr/bin/env bash
# The binding's share of the workspace's Rust source: non-test lines of
# crates/weir-python/src against those of every crates/*/src.
#
# A line counts when it is not blank, lies under crates/*/src (not tests/,
# examples/ or benches/), and comes before the file's `#[cfg(test)]` module
# (unit tests sit at the end of a file). Usage: ci/binding-share.sh [ROOT]
# prints both counts and the share; it exits 1 when the share is 10% or more.
set -euo pipefail
root="${1:-$(dirname "$0")/..}"

count() {
    # Non-blank lines before the first `#[cfg(test)]` of each file.
    find "$@" -name '*.rs' -print0 |
        xargs -0 awk 'FNR == 1 { in_tests = 0 } /^#\[cfg\(test\)\]/ { in_tests = 1 } !in_tests && NF { n++ } END { print n + 0 }' |
        awk '{ n += $1 } END { print n + 0 }'
}

binding=$(count "$root"/crates/weir-python/src)
total=$(count "$root"/crates/*/src)
awk -v b="$binding" -v t="$total" 'BEGIN {
    share = 100 * b / t
    printf "binding %d of %d non-test Rust source lines: %.1f%%\n", b, t, share
    exit (share < 10 ? 0 : 1)
}'
