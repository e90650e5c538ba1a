/**
 * Volumes (docs/contract.md#volumes): the record, the create body, the list.
 *
 * Rules of the create body (decisions of docs/contract.md#volumes):
 * - `size_gb`: a whole number of GiB, at least 1. Above `SVC_VOLUME_MAX_GIB` is the
 *   `volume_capacity_above_max` error (checked by the service: the maximum is a setting).
 * - `type`: `local` (the default) or `shared`.
 * - `name`: 1 to 120 printable characters, unique among the org's volumes; required for a
 *   `shared` volume. A `local` volume without one is named after its id (`derivedVolumeName`),
 *   a form a caller cannot pick.
 *
 * The record keeps the names of docs/contract.md#volumes. `state`, `attached_to`, `attachment_id`,
 * `mount_path` and `device_path` describe the oldest live attachment; `attachments` (added by
 * this contract) lists every one, for a shared volume attached to several sandboxes.
 */
import { Effect, Schema } from "effect"
import { AttachmentId, HostId, SandboxId, VolumeId } from "./Ids.ts"
import { Page } from "./Pagination.ts"
import { VolumeMode } from "./Sandbox.ts"
import { Bounded, MAX_RECORD_NAME, Name } from "./Text.ts"
import { NullableTimestamp, Timestamp } from "./Time.ts"

export const VolumeType = Schema.Literals(["local", "shared"])
export type VolumeType = typeof VolumeType.Type

/** `available` (attached nowhere), `attached` (to at least one sandbox not deleted), `deleted`. */
export const VolumeState = Schema.Literals(["available", "attached", "deleted"])
export type VolumeState = typeof VolumeState.Type

/** The storage driver: an ext4 image on a loop device, for both types. */
export const VOLUME_DRIVER = "local"

/** The default of `SVC_VOLUME_MAX_GIB`. */
export const DEFAULT_VOLUME_MAX_GIB = 1024

/** The name of a `local` volume created without one: derived from its id alone. */
export const derivedVolumeName = (id: string): string => `volume-${id.slice("vol_".length)}`

const DERIVED_NAME = /^volume-[0-9a-z]{26}$/

/** One sandbox the volume is attached to. */
export const VolumeAttachmentRef = Schema.Struct({
  attachment_id: AttachmentId,
  sandbox_id: SandboxId,
  host_id: Schema.NullOr(HostId),
  mount_path: Bounded(4096),
  subpath: Bounded(4096),
  mode: VolumeMode,
  device_path: Schema.NullOr(Bounded(256))
})
export type VolumeAttachmentRef = typeof VolumeAttachmentRef.Type

export const Volume = Schema.Struct({
  id: VolumeId,
  name: Bounded(MAX_RECORD_NAME),
  type: VolumeType,
  driver: Bounded(64),
  size_gb: Schema.Int,
  state: VolumeState,
  mount_path: Schema.NullOr(Bounded(4096)),
  /** A local volume's host (null until it is first attached); null for a shared volume. */
  host_id: Schema.NullOr(HostId),
  attachment_id: Schema.NullOr(AttachmentId),
  attached_to: Schema.NullOr(SandboxId),
  device_path: Schema.NullOr(Bounded(256)),
  auto_attach: Schema.Record(Schema.String, Schema.Json),
  // One per sandbox it is attached to: far fewer than an org's sandboxes can be.
  attachments: Schema.Array(VolumeAttachmentRef).check(Schema.isMaxLength(10_000)),
  createdAt: Timestamp,
  deletedAt: NullableTimestamp
})
export type Volume = typeof Volume.Type

export const VolumeList = Page("volumes", Volume)
export type VolumeList = typeof VolumeList.Type

/** Body of POST /v1/volumes (defaults applied when decoding). */
export const CreateVolumeRequest = Schema.Struct({
  name: Schema.optionalKey(
    Name(120).check(
      Schema.makeFilter((s: string) => !DERIVED_NAME.test(s) || "volume-<id> names are given to unnamed volumes only")
    )
  ),
  size_gb: Schema.Int.check(Schema.isGreaterThanOrEqualTo(1)),
  type: VolumeType.pipe(Schema.withDecodingDefaultKey(Effect.succeed("local" as const)))
})
export type CreateVolumeRequest = typeof CreateVolumeRequest.Type
