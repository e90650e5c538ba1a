/**
 * The `egress` KV entries a secret change writes (packages/host-protocol/src/Egress.ts), as
 * outbox messages of the change's own transaction: `secret.<id>` on create, rotate and update
 * (metadata and the value sealed for `secret:<id>`, as stored: never the plaintext), its
 * deletion on delete, and `sandbox.<id>` again for each sandbox the deletion unbound it from.
 */
import * as Outbox from "@svc/events/Outbox"
import {
  EGRESS_BUCKET,
  type EgressSecret,
  type SandboxEgress,
  sandboxEgressKey,
  secretEgressKey
} from "@svc/host-protocol/Egress"
import type { BoundSandbox, SealedRow } from "./Store.ts"

export const secretEntry = (row: SealedRow): EgressSecret => ({
  secretId: row.id,
  orgId: row.org_id,
  allowedHosts: row.allowed_hosts,
  headerName: row.header_name,
  headerFormat: row.header_format,
  sealedValue: row.sealed_value
})

export const putSecret = (row: SealedRow) => Outbox.kvPut(EGRESS_BUCKET, secretEgressKey(row.id), secretEntry(row))

export const deleteSecret = (id: string) => Outbox.kvDelete(EGRESS_BUCKET, secretEgressKey(id))

export const putSandbox = (s: BoundSandbox) =>
  Outbox.kvPut(
    EGRESS_BUCKET,
    sandboxEgressKey(s.id),
    { sandboxId: s.id, orgId: s.org_id, policy: s.network, secretIds: s.secret_ids } satisfies SandboxEgress
  )
