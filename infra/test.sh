#!/usr/bin/env bash
# npm test: the same set-up as npm start, then every test once (the typecheck is one of them).
# Each test run starts its own throwaway NATS and Postgres (or reuses NATS_URL / DATABASE_URL).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
cd "$ROOT"
mkdir -p .svc
exec vitest run --reporter=default --reporter=json --outputFile.json=.svc/test-results.json "$@"
