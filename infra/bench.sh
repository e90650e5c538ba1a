#!/usr/bin/env bash
# npm run bench [name...]: runs the benchmarks in bench/ (all, or those named), each starting what
# it needs and printing medians of several runs against a baseline measured in the same run.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
cd "$ROOT"
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for f in bench/*.ts; do names+=("$(basename "$f" .ts)"); done
fi
for name in "${names[@]}"; do
  echo "== bench/$name.ts"
  node "bench/$name.ts"
done
