/**
 * The volumes a sandbox's create attaches (the `volumes` table, packages/volumes), checked in the
 * create's transaction (docs/contract.md#volumes):
 *
 * - each must be a live volume of the org (400 naming the entry, `volumes.1.volume_id`);
 * - a `local` volume is attached to one sandbox at a time (409 while a sandbox that is not
 *   deleted has it), and every local volume of one sandbox must live on one host (409);
 * - the rows are held `FOR UPDATE` to the commit (in id order): a volume's delete takes the same
 *   lock, so it waits for this create and then sees its attachment; two creates attaching one
 *   local volume run one after the other, and the second sees the first's.
 *
 * Placement then takes the local volumes' host (`pinnedHost`), or, when none has one yet, any
 * host with room for their size too; `pin` records the host a new local volume's image is made on.
 */
import * as Rows from "@svc/db/Rows"
import * as Errors from "@svc/domain/Errors"
import type { SandboxVolumeRequest } from "@svc/domain/Sandbox"
import type { VolumeMount } from "@svc/host-protocol/Volumes"
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"

const VolumeRef = Schema.Struct({
  id: Schema.String,
  type: Schema.Literals(["local", "shared"]),
  size_gb: Schema.Int,
  host_id: Schema.NullOr(Schema.String)
})
type VolumeRef = typeof VolumeRef.Type

const refs = Rows.decoder("Sandboxes.volumeRefs", VolumeRef)
const users = Rows.decoder(
  "Sandboxes.volumeUsers",
  Schema.Struct({ volume_id: Schema.String, sandbox_id: Schema.String })
)

const invalid = (path: string, message: string) =>
  new Errors.InvalidRequest({ error: `Invalid request body: ${path} ${message}`, issues: [{ path, message }] })

export interface AttachPlan {
  /** What the host mounts, in the request's order. */
  readonly mounts: ReadonlyArray<VolumeMount>
  /** The host every local volume of the request lives on; null when none has one yet. */
  readonly pinnedHost: string | null
  /** Local volumes without a host yet: their images will be made on the sandbox's host. */
  readonly unpinned: ReadonlyArray<string>
  /** GiB the unpinned local volumes will take on that host. */
  readonly unpinnedGb: number
}

export const plan = (orgId: string, requested: ReadonlyArray<SandboxVolumeRequest>) =>
  Effect.gen(function*() {
    const none: AttachPlan = { mounts: [], pinnedHost: null, unpinned: [], unpinnedGb: 0 }
    if (requested.length === 0) return none
    const sql = yield* SqlClient.SqlClient
    const ids = [...new Set(requested.map((v) => v.volume_id))]
    const rows = yield* refs(sql`
      SELECT id, type, size_gb, host_id FROM volumes
      WHERE org_id = ${orgId} AND id = ANY(${ids}::text[]) AND deleted_at IS NULL
      ORDER BY id FOR UPDATE`)
    const byId = new Map<string, VolumeRef>(rows.map((r) => [r.id, r]))
    const missing = requested.findIndex((v) => !byId.has(v.volume_id))
    if (missing !== -1) return yield* invalid(`volumes.${missing}.volume_id`, "no such volume in this org")
    const twice = requested.findIndex((v, i) =>
      byId.get(v.volume_id)!.type === "local" && requested.findIndex((w) => w.volume_id === v.volume_id) !== i
    )
    if (twice !== -1) return yield* invalid(`volumes.${twice}.volume_id`, "a local volume is mounted once per sandbox")
    const local = rows.filter((r) => r.type === "local")
    if (local.length > 0) {
      const taken = yield* users(sql`
        SELECT a->>'volume_id' AS volume_id, s.id AS sandbox_id
        FROM sandboxes s CROSS JOIN LATERAL jsonb_array_elements(s.volume_attachments) a
        WHERE s.org_id = ${orgId} AND s.state <> 'deleted' AND s.volume_attachments <> '[]'::jsonb
          AND a->>'volume_id' = ANY(${local.map((r) => r.id)}::text[])
        LIMIT 1`)
      if (taken.length > 0) {
        return yield* new Errors.Conflict({
          error: `Volume ${taken[0]!.volume_id} is local and attached to ${
            taken[0]!.sandbox_id
          }; a local volume is attached to one sandbox at a time (use a shared volume for several)`
        })
      }
    }
    const hosts = [...new Set(local.flatMap((r) => (r.host_id === null ? [] : [r.host_id])))]
    if (hosts.length > 1) {
      return yield* new Errors.Conflict({
        error: "These local volumes live on different hosts; one sandbox can only use local volumes of one host"
      })
    }
    const unpinned = local.filter((r) => r.host_id === null)
    return {
      mounts: requested.map((v) => {
        const row = byId.get(v.volume_id)!
        return {
          volumeId: row.id,
          type: row.type,
          sizeGb: row.size_gb,
          mountPath: v.mount_path,
          subpath: v.subpath,
          mode: v.mode
        }
      }),
      pinnedHost: hosts[0] ?? null,
      unpinned: unpinned.map((r) => r.id),
      unpinnedGb: unpinned.reduce((sum, r) => sum + r.size_gb, 0)
    } satisfies AttachPlan
  })

/** Records the host the local volumes' images are made on (their rows are locked by `plan`). */
export const pin = (volumeIds: ReadonlyArray<string>, hostId: string) =>
  Effect.gen(function*() {
    if (volumeIds.length === 0) return
    const sql = yield* SqlClient.SqlClient
    yield* sql`UPDATE volumes SET host_id = ${hostId} WHERE id = ANY(${[...volumeIds]}::text[]) AND host_id IS NULL`
  })
