#!/usr/bin/env bash
# npm run svc -- <command>: the svc CLI on the pinned Node (e.g. `npm run svc -- sandbox list`).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh" 2>/dev/null
# The state and data dirs default to .svc of the working directory: the repository's, from here.
export SVC_STATE_DIR="${SVC_STATE_DIR:-$ROOT/.svc}"
export SVC_DATA_DIR="${SVC_DATA_DIR:-$SVC_STATE_DIR/data}"
# V8's compile cache (as bin/svc): a start after the first skips compiling the client's modules.
export NODE_COMPILE_CACHE="${NODE_COMPILE_CACHE:-$SVC_STATE_DIR/compile-cache}"
exec node "$ROOT/apps/cli/src/main.ts" "$@"
