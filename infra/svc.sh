#!/usr/bin/env bash
# npm run svc -- <command>: the svc CLI on the pinned Node (e.g. `npm run svc -- sandbox list`).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh" 2>/dev/null
exec node "$ROOT/apps/cli/src/main.ts" "$@"
