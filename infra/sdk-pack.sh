#!/usr/bin/env bash
# npm run sdk:pack: builds @svc/sdk (packages/sdk/scripts/build.ts) and packs it with npm into
# packages/sdk/svc-sdk-<version>.tgz, installable in any Node 22+ project.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh" 2>/dev/null
cd "$ROOT/packages/sdk"
node scripts/build.ts
npm pack ./dist --pack-destination .
