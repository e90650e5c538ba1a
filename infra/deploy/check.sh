#!/usr/bin/env bash
# Checks every file of infra/deploy with the tool that reads it: nats-server -t for the cluster
# configuration (with the example env file's variables; its users generated from Permissions.ts),
# systemd-analyze verify for the units.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
set -a; source env/nats.env; set +a
# The users and permissions are what @svc/host-protocol/Permissions says (for the example hosts).
if ! diff -u nats/authorization.conf <(node nats-authorization.ts host-1 host-2 host-3); then
  echo "nats/authorization.conf differs from Permissions.ts: node infra/deploy/nats-authorization.ts host-1 host-2 host-3 > infra/deploy/nats/authorization.conf" >&2
  exit 1
fi
nats-server -t -c nats/cluster.conf
if command -v systemd-analyze >/dev/null; then
  # verify wants the units' binaries; it checks syntax, directives and that ExecStart exists.
  tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
  cp systemd/* "$tmp/"
  for unit in svc-api@8080.service svc-runtime@1.service svc-dispatcher@1.service svc-agent.service svc-nats.service; do
    base="${unit%%@*}"; [ "$base" != "$unit" ] && cp "systemd/${base}@.service" "$tmp/$unit"
  done
  (cd "$tmp" && SYSTEMD_LOG_LEVEL=warning systemd-analyze verify --man=no ./svc-api@8080.service ./svc-runtime@1.service ./svc-dispatcher@1.service ./svc-agent.service ./svc-nats.service)
fi
echo "infra/deploy: every file checked"
