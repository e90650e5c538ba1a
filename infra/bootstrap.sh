#!/usr/bin/env bash
# Installs what the project needs and is missing, idempotently. Sourced by start.sh, test.sh and
# bench.sh so that they run with the pinned Node first on PATH.
#   - Node 24 and pnpm from the npm registry into .svc/tools (never touches the system Node)
#   - nats-server, postgresql, bubblewrap, iproute2, nftables, e2fsprogs, mount, gcc + libc6-dev,
#     mmdebstrap, wrk (the benchmarks' load generator), python3 + python3-venv + mypy (the Python SDK),
#     openssl, curl + ca-certificates (the base template's HTTP client), skopeo + umoci +
#     docker-registry + apache2-utils (OCI image templates' tests and bench)
#     from Debian's packages when absent
#   - chromium (the dashboard's browser tests drive it with playwright-core)
#   - the workspace's packages (pnpm install), then the dashboard's build when its sources changed
# When sourced, the caller's shell options are restored at the end (set -e must not leak).
_svc_saved_opts="$(set +o)"
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/.svc/tools"
NODE_VERSION="24.21.0"
PNPM_VERSION="$(sed -n 's/.*"packageManager": *"pnpm@\([^"]*\)".*/\1/p' "$ROOT/package.json")"

log() { printf '[setup] %s\n' "$*" >&2; }

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# Debian packages: only what is missing, one apt-get run.
missing=()
command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] || missing+=(nats-server)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || missing+=(nftables)
command -v nsenter >/dev/null 2>&1 || missing+=(util-linux)
command -v setpriv >/dev/null 2>&1 || missing+=(util-linux)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
# The base template's HTTP client (the host's curl, copied in) and the CAs it trusts.
[ -x /usr/bin/curl ] || missing+=(curl)
[ -f /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)
# Sandbox disks are ext4 images (mkfs.ext4); the driver's start script mounts with mount(8).
[ -x /sbin/mkfs.ext4 ] || [ -x /usr/sbin/mkfs.ext4 ] || missing+=(e2fsprogs)
[ -x /bin/mount ] || [ -x /usr/bin/mount ] || missing+=(mount)
command -v psql >/dev/null 2>&1 || missing+=(postgresql-client)
[ -x /bin/busybox ] || missing+=(busybox-static)
# The `debian` image root is built by the platform from Debian's packages (packages/host/src/Debian.ts).
command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
# The driver builds its native entry helper (packages/sandboxes/native) with the C compiler.
command -v cc >/dev/null 2>&1 || missing+=(gcc)
[ -f /usr/include/linux/seccomp.h ] && [ -f /usr/include/stdio.h ] || missing+=(libc6-dev)
# The benchmarks' HTTP load generator (bench/lib/Wrk.ts): native, so it outruns the servers measured.
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
# The Python SDK (sdks/python): its tests run on python3, install it into a fresh virtual
# environment (venv with pip: python3-venv) and type-check it (mypy --strict).
command -v python3 >/dev/null 2>&1 || missing+=(python3)
python3 -c "import ensurepip, venv" >/dev/null 2>&1 || missing+=(python3-venv)
command -v mypy >/dev/null 2>&1 || missing+=(mypy)
# Templates from OCI images: the tests run the CNCF distribution registry (docker-registry) on
# loopback with htpasswd auth (apache2-utils), push images built with umoci and skopeo; the bench
# measures a pull by hand with them (packages/testing/src/TestRegistry.ts, bench/images.ts).
command -v skopeo >/dev/null 2>&1 || missing+=(skopeo)
command -v umoci >/dev/null 2>&1 || missing+=(umoci)
[ -x /usr/bin/docker-registry ] || missing+=(docker-registry)
command -v htpasswd >/dev/null 2>&1 || missing+=(apache2-utils)
# The dashboard's end-to-end tests drive Debian's chromium (Playwright's own download is not used).
[ -x /usr/bin/chromium ] || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# Pinned Node and pnpm, from the npm registry (corepack cannot verify pnpm here).
if [ "$("$TOOLS/node_modules/.bin/node" --version 2>/dev/null)" != "v$NODE_VERSION" ] \
  || [ "$("$TOOLS/node_modules/.bin/pnpm" --version 2>/dev/null)" != "$PNPM_VERSION" ]; then
  log "installing node@$NODE_VERSION and pnpm@$PNPM_VERSION into .svc/tools"
  mkdir -p "$TOOLS"
  [ -f "$TOOLS/package.json" ] || echo '{"private":true}' > "$TOOLS/package.json"
  (cd "$TOOLS" && npm install --no-audit --no-fund --loglevel=error "node@$NODE_VERSION" "pnpm@$PNPM_VERSION" >&2)
fi
export PATH="$TOOLS/node_modules/.bin:$PATH"

# Workspace packages; a stamp avoids re-running pnpm when nothing changed.
stamp="$ROOT/node_modules/.svc-install-stamp"
sum="$( (cat "$ROOT/pnpm-lock.yaml" "$ROOT/package.json" "$ROOT"/packages/*/package.json "$ROOT"/apps/*/package.json 2>/dev/null || true) | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$sum" ]; then
  log "installing workspace packages"
  if [ -f "$ROOT/pnpm-lock.yaml" ] && [ "${CI:-}" = "true" ]; then
    (cd "$ROOT" && flock /tmp/svc-pnpm.lock pnpm install --frozen-lockfile --reporter=silent >&2)
  else
    (cd "$ROOT" && flock /tmp/svc-pnpm.lock pnpm install --reporter=silent >&2)
  fi
  echo "$sum" > "$stamp"
fi
export PATH="$ROOT/node_modules/.bin:$PATH"

# The dashboard the API serves at / (apps/dashboard/dist): built when its sources, settings or
# dependencies changed (the script keeps its own stamp, a hash of them, in dist/).
(cd "$ROOT" && node apps/dashboard/scripts/build.ts --quiet >&2)
eval "$_svc_saved_opts"
unset _svc_saved_opts
