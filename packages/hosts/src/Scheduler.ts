/**
 * Placement: which live host takes a new sandbox.
 *
 * A host fits when it is live (fresh heartbeat), in the requested region (any region when none
 * is asked for), and its capacity minus what its sandboxes hold (from the `sandboxes` table)
 * covers the request's cpu, ram_mb and disk_gb. A template's create goes first to a host whose
 * record lists ready warm pool sandboxes of that template (docs/architecture.md#warm-pools): the
 * count is up to 2 s old, so a burst larger than the pool cold-boots the rest there. A host's `capacity.cpu` is already its cores times
 * its agent's `SVC_HOST_CPU_OVERCOMMIT` (8): a sandbox's cpu is a cgroup cap, not a reserved core,
 * while memory and disk are offered as they are. Every sandbox not deleted holds its disk; only
 * those that may run processes hold cpu and memory (a stopped or failed one does not, so a
 * start later may oversubscribe a host that filled up meanwhile: its cgroups still cap it). Among those that fit, the
 * one that holds most of the sandbox's image wins (a template's root and layers, as its host record
 * lists them: no pull, no extraction), then the one with the most free memory (spreading load),
 * then the most free cpu, then the id.
 *
 * `place` runs inside the create transaction under one advisory lock, and the new row (with its
 * `host_id`) is inserted before the commit: two creates never both take the last room on a host.
 * The lock serializes placements (a few ms each), far above the creates per second needed here;
 * a per-region or per-host lock would be the next step.
 */
import * as Rows from "@svc/db/Rows"
import type { HostRecord } from "@svc/host-protocol/Protocol"
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { isLive } from "./Hosts.ts"

export interface PlacementRequest {
  /** null: any region. */
  readonly region: string | null
  readonly cpu: number
  readonly ramMb: number
  readonly diskGb: number
  /** Only this host (where the sandbox's local volumes live); null or absent: any. */
  readonly hostId?: string | null
  /** A template's image: the host holding most of it is preferred. */
  readonly image?: { readonly root: string; readonly layers: ReadonlyArray<string> }
  /** The template's id: a host with ready pool sandboxes of it is preferred above all. */
  readonly templateId?: string
}

export interface Usage {
  readonly cpu: number
  readonly ramMb: number
  readonly diskGb: number
}

/**
 * `reason` becomes the sandbox's `errorMessage`: what the request asked for and, at most, which
 * regions are live, never another host's id or capacity (other tenants' usage shows in it).
 * `detail` says which host came closest, for the operator's log.
 */
export type Placement =
  | { readonly _tag: "Placed"; readonly host: HostRecord }
  | {
    readonly _tag: "Unplaceable"
    readonly reason: string
    readonly detail: string
    /**
     * Why: `no_room` (live hosts, none with room), `no_host` (no live host at all, any region
     * asked), `no_host_in_region` (none live in the region asked for), `pinned_host_down` (the
     * host of its local volumes is not live). The first two are the platform's capacity, which
     * frees or returns: the API refuses those creates at once (503 `no_capacity`).
     */
    readonly kind: "no_room" | "no_host" | "no_host_in_region" | "pinned_host_down"
  }

const NONE: Usage = { cpu: 0, ramMb: 0, diskGb: 0 }

const describe = (r: { readonly cpu: number; readonly ramMb: number; readonly diskGb: number }) =>
  `cpu ${r.cpu}, ram_mb ${r.ramMb}, disk_gb ${r.diskGb}`

/** What of `image` a host lacks: its layers missing there, and the root when not `base` and missing. */
export const missingOf = (host: HostRecord, image: PlacementRequest["image"]): number => {
  if (image === undefined) return 0
  const held = new Set(host.layers ?? [])
  const root = image.root === "base" || (host.roots ?? []).includes(image.root) ? 0 : 1
  return root + image.layers.filter((layer) => !held.has(layer)).length
}

/** The pure choice. `usage` is per host id (hosts missing from it hold nothing). */
export const choose = (
  hosts: ReadonlyArray<HostRecord>,
  usage: ReadonlyMap<string, Usage>,
  request: PlacementRequest,
  now: number
): Placement => {
  const live = hosts.filter((h) => isLive(h, now))
  const pinned = request.hostId ?? null
  const inRegion = (request.region === null ? live : live.filter((h) => h.region === request.region))
    .filter((h) => pinned === null || h.hostId === pinned)
  if (inRegion.length === 0 && pinned !== null) {
    // The tenant's own volume's host: naming it tells nothing about other tenants.
    const where = request.region === null ? "" : ` in region ${request.region}`
    const reason = `the host of its local volumes (${pinned}) is not live${where}`
    return { _tag: "Unplaceable", reason, detail: reason, kind: "pinned_host_down" }
  }
  if (inRegion.length === 0) {
    const where = request.region === null ? "" : ` in region ${request.region}`
    const regions = [...new Set(live.map((h) => h.region))].sort()
    const others = request.region !== null && regions.length > 0 ? ` (live regions: ${regions.join(", ")})` : ""
    const reason = `no live host${where}${others}`
    return {
      _tag: "Unplaceable",
      reason,
      detail: reason,
      kind: request.region === null ? "no_host" : "no_host_in_region"
    }
  }
  const free = inRegion.map((host) => {
    const used = usage.get(host.hostId) ?? NONE
    return {
      host,
      cpu: host.capacity.cpu - used.cpu,
      ramMb: host.capacity.ramMb - used.ramMb,
      diskGb: host.capacity.diskGb - used.diskGb
    }
  })
  const fits = free.filter((f) => f.cpu >= request.cpu && f.ramMb >= request.ramMb && f.diskGb >= request.diskGb)
  if (fits.length === 0) {
    const best = [...free].sort((a, b) => b.ramMb - a.ramMb || b.cpu - a.cpu)[0]!
    const where = request.region === null ? "" : ` in region ${request.region}`
    const reason = `no live host${where} has room for ${describe(request)}`
    return {
      _tag: "Unplaceable",
      reason,
      kind: "no_room",
      detail: `${reason} (most free: ${best.host.hostId} with ${
        describe({ cpu: Math.max(0, best.cpu), ramMb: Math.max(0, best.ramMb), diskGb: Math.max(0, best.diskGb) })
      })`
    }
  }
  const missing = new Map(fits.map((f) => [f.host.hostId, missingOf(f.host, request.image)]))
  const pooled = (host: HostRecord) =>
    request.templateId !== undefined && (host.pools?.[request.templateId] ?? 0) > 0 ? 0 : 1
  fits.sort((a, b) =>
    pooled(a.host) - pooled(b.host) ||
    missing.get(a.host.hostId)! - missing.get(b.host.hostId)! ||
    b.ramMb - a.ramMb || b.cpu - a.cpu || (a.host.hostId < b.host.hostId ? -1 : a.host.hostId > b.host.hostId ? 1 : 0)
  )
  return { _tag: "Placed", host: fits[0]!.host }
}

/** The hosts' usage: sums of `integer` columns, `bigint` to Postgres. */
const UsageRow = Schema.Struct({ host_id: Schema.String, cpu: Rows.Int8, ram_mb: Rows.Int8, disk_gb: Rows.Int8 })
const usageRows = Rows.decoder("Scheduler.place", UsageRow)
/** The same rows as `usageExpression`'s JSON array (`json_agg` renders the sums as numbers). */
const UsageJson = Schema.Array(
  Schema.Struct({ host_id: Schema.String, cpu: Schema.Number, ram_mb: Schema.Number, disk_gb: Schema.Number })
)
const decodeUsageJson = Schema.decodeUnknownEffect(UsageJson)

// Any fixed 64-bit key: placements of every process run one at a time.
const PLACEMENT_LOCK_KEY = 0x5356_5ced

/**
 * The placement lock as an expression, for a caller that takes it in a statement of its own
 * (the create's org lock) and then reads the usage with `usageExpression` in a later statement
 * (a statement's snapshot is taken before its locks) and places with `placeWith`.
 */
export const placementLock = (sql: SqlClient.SqlClient) => sql`pg_advisory_xact_lock(${PLACEMENT_LOCK_KEY})`

/** What the sandboxes and the local volumes on `ids` hold (their images are sparse too). */
const usageQuery = (sql: SqlClient.SqlClient, ids: ReadonlyArray<string>) =>
  sql`SELECT host_id, sum(cpu)::int8 AS cpu, sum(ram_mb)::int8 AS ram_mb, sum(disk_gb)::int8 AS disk_gb FROM (
      SELECT host_id,
             coalesce(sum(cpu) FILTER (WHERE state NOT IN ('stopped', 'error')), 0) AS cpu,
             coalesce(sum(ram_mb) FILTER (WHERE state NOT IN ('stopped', 'error')), 0) AS ram_mb,
             sum(disk_gb) AS disk_gb
      FROM sandboxes WHERE host_id = ANY(${ids}::text[]) AND state <> 'deleted'
      GROUP BY host_id
      UNION ALL
      SELECT host_id, 0, 0, sum(size_gb)
      FROM volumes WHERE host_id = ANY(${ids}::text[]) AND deleted_at IS NULL AND type = 'local'
      GROUP BY host_id
    ) held GROUP BY host_id`

/** The live hosts a request may go to, before its pinned host is known: region only. */
const regionCandidates = (hosts: ReadonlyArray<HostRecord>, region: string | null, now: number) =>
  hosts.filter((h) => isLive(h, now) && (region === null || h.region === region))

/**
 * The usage of the live hosts of `region` (null: every live host) as one expression, a JSON
 * array, for a statement the caller runs anyway after the placement lock: one round trip less
 * than `place`'s own read. Decoded by `placeWith`.
 */
export const usageExpression = (
  sql: SqlClient.SqlClient,
  hosts: ReadonlyArray<HostRecord>,
  region: string | null,
  now: number
) => {
  const ids = regionCandidates(hosts, region, now).map((h) => h.hostId)
  return sql`(SELECT coalesce(json_agg(u), '[]'::json) FROM (${usageQuery(sql, ids)}) u)`
}

const toUsage = (
  rows: ReadonlyArray<
    { readonly host_id: string; readonly cpu: unknown; readonly ram_mb: unknown; readonly disk_gb: unknown }
  >
) =>
  new Map<string, Usage>(
    rows.map((r) => [r.host_id, { cpu: Number(r.cpu), ramMb: Number(r.ram_mb), diskGb: Number(r.disk_gb) }])
  )

/**
 * Chooses from the usage `usageExpression` read (`usage`: that column's value) under the
 * placement lock the caller holds; `hosts` and `now` as given to `usageExpression`, and the
 * request's region the one it was given.
 */
export const placeWith = (
  hosts: ReadonlyArray<HostRecord>,
  usage: unknown,
  request: PlacementRequest,
  now: number
): Effect.Effect<Placement, Rows.RowDecodeError> =>
  decodeUsageJson(usage).pipe(
    Effect.mapError((e) => new Rows.RowDecodeError({ query: "Scheduler.placeWith", message: e.message })),
    Effect.map((rows) => choose(hosts, toUsage(rows), request, now))
  )

/**
 * Places within the caller's transaction: takes the placement lock (held to the commit, so the
 * caller must insert the sandbox row in the same transaction) unless `locked` says the caller
 * took it (`placementLock`), reads the hosts' usage, chooses.
 */
export const place = Effect.fn("Scheduler.place")(function*(
  hosts: ReadonlyArray<HostRecord>,
  request: PlacementRequest,
  now: number,
  options: { readonly locked?: boolean } = {}
) {
  const sql = yield* SqlClient.SqlClient
  const candidates = regionCandidates(hosts, request.region, now).filter((h) =>
    request.hostId == null || h.hostId === request.hostId
  )
  if (candidates.length === 0) return choose(hosts, new Map(), request, now)
  if (options.locked !== true) yield* sql`SELECT ${placementLock(sql)}`
  const rows = yield* usageRows(usageQuery(sql, candidates.map((h) => h.hostId)))
  return choose(hosts, toUsage(rows), request, now)
})
