/**
 * What the hosts' egress proxies need to know about each sandbox and each bound secret
 * (docs/contract.md#snapshots-network-policy-and-exposed-ports, #secrets), declared once for the control plane, which
 * writes it, and the host agents, which read it.
 *
 * The `egress` KV bucket holds two kinds of entries:
 *
 *   sandbox.<sandboxId>  `SandboxEgress`: the sandbox's policy and the ids of its bound secrets
 *   secret.<secretId>    `EgressSecret`: where and how the proxy writes the secret, and its
 *                        value sealed with `SecretBox` (AAD `secretValueAad(id)`)
 *
 * The control plane writes an entry in the same transaction as the change that causes it
 * (through the outbox), so a committed policy change, binding or rotation always reaches the
 * hosts; a deleted sandbox or secret is a deleted entry. Agents watch the bucket and keep the
 * entries of their sandboxes in memory: a change applies to the next connection. A value is
 * opened only in the proxy's memory, when a request needs it.
 *
 * The rules of a policy are `@svc/domain/Network`'s.
 */
import type { BucketSpec } from "@svc/bus/Topology"
import { NetworkPolicy } from "@svc/domain/Network"
import { Schema } from "effect"

export const EGRESS_BUCKET = "egress"
export const EGRESS_BUCKET_SPEC: BucketSpec = { name: EGRESS_BUCKET, history: 1 }

export const sandboxEgressKey = (sandboxId: string) => `sandbox.${sandboxId}`
export const secretEgressKey = (secretId: string) => `secret.${secretId}`
/** The AAD a secret's value is sealed with: a value copied to another secret does not open. */
export const secretValueAad = (secretId: string) => `secret:${secretId}`

/** `sandbox.<sandboxId>`. */
export const SandboxEgress = Schema.Struct({
  sandboxId: Schema.String,
  orgId: Schema.String,
  policy: NetworkPolicy,
  /** Bound secrets, in binding order; an id with no `secret.<id>` entry (deleted) is skipped. */
  secretIds: Schema.Array(Schema.String)
})
export type SandboxEgress = typeof SandboxEgress.Type

/** `secret.<secretId>`. */
export const EgressSecret = Schema.Struct({
  secretId: Schema.String,
  orgId: Schema.String,
  /** Hosts (exact names, or `*.example.com`) whose requests get the header; nowhere else. */
  allowedHosts: Schema.Array(Schema.String),
  /** `Authorization` unless the secret says otherwise. */
  headerName: Schema.String,
  /** `Bearer {value}` unless the secret says otherwise; `{value}` is replaced by the value. */
  headerFormat: Schema.String,
  /** `SecretBox.seal(value, secretValueAad(secretId))`. */
  sealedValue: Schema.String
})
export type EgressSecret = typeof EgressSecret.Type
