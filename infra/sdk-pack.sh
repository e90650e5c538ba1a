#!/usr/bin/env bash
# npm run sdk:pack: builds @svc/sdk (packages/sdk/scripts/build.ts) and packs it with npm into
# packages/sdk/svc-sdk-<version>.tgz, installable in any Node 22+ project; then the Python SDK's
# wheel, sdks/python/dist/svc_sdk-<version>-py3-none-any.whl (`pip install` it anywhere with
# Python 3.9+), built by its own standard-library backend (no pip or setuptools needed).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh" 2>/dev/null
cd "$ROOT/packages/sdk"
node scripts/build.ts
npm pack ./dist --pack-destination .
cd "$ROOT/sdks/python"
mkdir -p dist
python3 -c 'import sys; sys.path.insert(0, "_build"); import backend; print("dist/" + backend.build_wheel("dist"))'
