#!/usr/bin/env bash
# Core crates must not depend on pyo3: only weir-python is glue.
set -euo pipefail
status=0
for manifest in crates/*/Cargo.toml; do
  crate=$(basename "$(dirname "$manifest")")
  [ "$crate" = weir-python ] && continue
  if cargo tree -p "$crate" -e normal --prefix none 2>/dev/null | grep -q '^pyo3 '; then
    echo "$crate depends on pyo3; only weir-python may" >&2
    status=1
  fi
done
exit $status
