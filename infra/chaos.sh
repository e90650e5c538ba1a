#!/usr/bin/env bash
# npm run chaos: the platform scaled out on this machine (3 NATS nodes, 2 of each role, one
# Postgres), a bounded load with processes killed -9 and a NATS node down, and its figures
# (bench/chaos.ts; CHAOS_DURATION, CHAOS_KILL_EVERY, CHAOS_WORKERS). Exits 1 when anything was lost.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
cd "$ROOT"
exec node bench/chaos.ts "$@"
