#!/usr/bin/env bash
# npm run bench [name...]: runs the benchmarks in bench/ (all, or those named), each starting what
# it needs and printing medians of several runs against a baseline measured in the same run, then
# one table of every figure of the run (bench/lib/Report.ts).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
cd "$ROOT"
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for f in bench/*.ts; do names+=("$(basename "$f" .ts)"); done
fi
BENCH_REPORT="$(mktemp -t svc-bench-XXXXXX.jsonl)"
export BENCH_REPORT
trap 'rm -f "$BENCH_REPORT"' EXIT
for name in "${names[@]}"; do
  echo "== bench/$name.ts"
  node "bench/$name.ts"
done
node bench/lib/Report.ts "$BENCH_REPORT"
