#!/usr/bin/env bash
# npm run cli:pack: builds the installable svc (apps/cli/scripts/build.ts: the user's commands
# bundled into one file, no dependency) and packs it with npm into apps/cli/svc-cli-<version>.tgz,
# which `npm install -g` installs on any machine with Node 22+, offline.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh" 2>/dev/null
cd "$ROOT/apps/cli"
node scripts/build.ts
npm pack ./dist --pack-destination .
