/**
 * Volumes between the control plane and the hosts (docs/contract.md#volumes, the design in
 * docs/architecture.md#volumes), declared once for both sides.
 *
 * - `VolumeMount`: one volume of a sandbox, in the `create` command (and in the driver's record
 *   of the sandbox, so a later `start` mounts it again).
 * - The `volumes` KV bucket, `volume.<volumeId>` → `VolumeEntry`: put when a volume is created,
 *   deleted when it is deleted (through the outbox, in the transaction of the change). Agents
 *   watch it: a deleted entry makes the host holding the volume's image remove it. A volume's
 *   image is made by the host that first mounts it, so creating one needs no host.
 */
import type { BucketSpec } from "@svc/bus/Topology"
import { Schema } from "effect"

export const VOLUMES_BUCKET = "volumes"
export const VOLUMES_BUCKET_SPEC: BucketSpec = { name: VOLUMES_BUCKET, history: 1 }

export const volumeKey = (volumeId: string) => `volume.${volumeId}`

const VolumeIdText = Schema.String.check(
  Schema.isPattern(/^vol_[0-7][0-9a-hjkmnp-tv-z]{25}$/, { message: "a volume id (vol_...)" })
)

/** `volume.<volumeId>`. */
export const VolumeEntry = Schema.Struct({
  volumeId: VolumeIdText,
  orgId: Schema.String,
  type: Schema.Literals(["local", "shared"]),
  sizeGb: Schema.Int
})
export type VolumeEntry = typeof VolumeEntry.Type

/** A relative path without `..`, NUL or a leading `/` (empty: the volume's root). */
const Subpath = Schema.String.check(
  Schema.makeFilter((p: string) =>
    (!p.startsWith("/") && !p.includes("\u0000") && !p.split("/").includes("..") && p.length <= 4096) ||
    "a relative path without .. or NUL"
  )
)

/** One volume of a sandbox, as its host mounts it. */
export const VolumeMount = Schema.Struct({
  volumeId: VolumeIdText,
  type: Schema.Literals(["local", "shared"]),
  sizeGb: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1), Schema.isLessThanOrEqualTo(1 << 20)),
  /** Absolute, not `/`, no `..` and no NUL. */
  mountPath: Schema.String.check(
    Schema.makeFilter((p: string) =>
      (p.startsWith("/") && p !== "/" && !p.includes("\u0000") && !p.split("/").includes("..") && p.length <= 4096) ||
      "an absolute path other than /, without .. or NUL"
    )
  ),
  subpath: Subpath,
  mode: Schema.Literals(["rw", "ro"])
})
export type VolumeMount = typeof VolumeMount.Type
