#!/usr/bin/env bash
# npm start: install what is missing, then run the whole platform in one process (`svc dev`):
# NATS and Postgres with their data under .svc/data, the API on http://127.0.0.1:${SVC_PORT:-8080}.
# NATS wants a user per role, Postgres a password, and .svc is root's alone (docs/security.md).
# Ctrl-C stops everything it started; so does the end of the npm process that started it (npm
# exits on SIGTERM without waiting for its script, which pdeathsig turns into our own SIGTERM).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
cd "$ROOT"
exec setpriv --pdeathsig SIGTERM -- node apps/cli/src/main.ts dev "$@"
