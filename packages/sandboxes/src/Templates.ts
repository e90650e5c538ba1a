/**
 * Templates as the API sees them (docs/contract.md#templates): create (the `building` row and
 * the host's `build` command through the outbox, in one transaction), snapshot (the same, its
 * build reading a running sandbox's writable layer), list, get, logs, delete (409 while a live
 * sandbox uses it), and what a sandbox create needs of a template (`resolve`).
 *
 * A build's end comes from its host's `builds` KV entry (@svc/host-protocol/Images): `settle`,
 * run about every second by each API process, applies it to the row once (the update is guarded
 * by `state = 'building'`) with `template.state_updated` in the same transaction; it also fails a
 * build whose host is down, and one past its deadline (`SVC_TEMPLATE_BUILD_TIMEOUT`).
 *
 * Image collection (`collect`, on the same loop after a template is deleted or a build ends, and
 * every ten minutes): a layer of the `images` store that no live template lists, older than
 * `SVC_IMAGE_GC_GRACE`, is removed from the store with its layer-cache entries (the cache first,
 * so that no new build takes it); each host then removes its extracted copy (apps/agent Images).
 * Skipped while any build runs: a running build may have taken such a layer from the cache.
 */
import { Nats } from "@svc/bus/Nats"
import { ensureObjectStore, type ObjectStore } from "@svc/bus/Objects"
import { ensureBucket } from "@svc/bus/Topology"
import * as Rows from "@svc/db/Rows"
import * as Errors from "@svc/domain/Errors"
import { BASE_TEMPLATE_ID, DEBIAN_TEMPLATE_ID, makeTemplateId, type OrgId } from "@svc/domain/Ids"
import { type ListQuery, pageInfo } from "@svc/domain/Pagination"
import { type CreateTemplateRequest, Template, type TemplatePage, type TemplateStep } from "@svc/domain/Template"
import * as Outbox from "@svc/events/Outbox"
import { wakeIfPresent } from "@svc/events/Relay"
import {
  type BuildCommand,
  BUILDS_BUCKET_SPEC,
  BuildStatus,
  imageDigestInput,
  type ImageRootName,
  IMAGES_OBJECT_STORE,
  LAYER_CACHE_BUCKET_SPEC,
  type SandboxImage
} from "@svc/host-protocol/Images"
import { agentSubject } from "@svc/host-protocol/Protocol"
import { Context, Duration, Effect, Layer, Option, Schema, Stream } from "effect"
import { SqlClient } from "effect/sql"
import { createHash } from "node:crypto"
import { ImageGcGrace, TemplateBuildTimeout } from "./Config.ts"
import { Hosts } from "./Hosts.ts"
import * as Scheduler from "./Scheduler.ts"

const Row = Schema.Struct({
  id: Schema.String,
  org_id: Schema.String,
  name: Schema.String,
  base: Schema.String,
  root: Schema.Literals(["base", "debian"]),
  layers: Schema.Array(Schema.String),
  env: Schema.Record(Schema.String, Schema.String),
  start_cmd: Schema.NullOr(Schema.String),
  ready_cmd: Schema.NullOr(Schema.String),
  state: Schema.Literals(["building", "ready", "failed"]),
  image: Schema.NullOr(Schema.String),
  error_message: Schema.NullOr(Schema.String),
  build_log: Schema.NullOr(Schema.String),
  host_id: Schema.NullOr(Schema.String),
  deadline_at: Schema.Date,
  created_at: Schema.Date,
  built_at: Schema.NullOr(Schema.Date)
})
type Row = typeof Row.Type
const COLUMNS = `id, org_id, name, base, root, layers, env, start_cmd, ready_cmd, state, image, error_message,
  build_log, host_id, deadline_at, created_at, built_at`

const rows = Rows.decoder("Templates", Row)
const counted = Rows.decoder("Templates.count", Schema.Struct({ n: Schema.Int }))
const used = Rows.decoder("Templates.inUse", Schema.Struct({ id: Schema.String }))
const layerRows = Rows.decoder("Templates.layers", Schema.Struct({ layer: Schema.String }))
const LAYER_HEX = /^[0-9a-f]{64}$/

/** Collection runs at least this often (more often when a template goes or a build ends). */
const COLLECT_EVERY_MS = 10 * 60_000

const BASE_RECORD = (): Template =>
  new Template({
    id: BASE_TEMPLATE_ID,
    name: "base",
    state: "ready",
    image: null,
    base: "base",
    errorMessage: null,
    start_cmd: null,
    ready_cmd: null,
    createdAt: new Date(0).toISOString(),
    builtAt: new Date(0).toISOString()
  })

const DEBIAN_RECORD = (): Template =>
  new Template({ ...BASE_RECORD(), id: DEBIAN_TEMPLATE_ID, name: "debian", base: "debian" })

/** What a template's `base` shows for its parent: the roots by name, any other by id. */
const baseName = (id: string) => id === BASE_TEMPLATE_ID ? "base" : id === DEBIAN_TEMPLATE_ID ? "debian" : id

const toRecord = (row: Row) =>
  new Template({
    id: row.id,
    name: row.name,
    state: row.state,
    image: row.image,
    base: row.base,
    errorMessage: row.error_message,
    start_cmd: row.start_cmd,
    ready_cmd: row.ready_cmd,
    createdAt: row.created_at.toISOString(),
    builtAt: row.built_at?.toISOString() ?? null
  })

export const imageDigest = (root: ImageRootName, layers: ReadonlyArray<string>) =>
  `sha256:${createHash("sha256").update(imageDigestInput(root, layers)).digest("hex")}`

const invalid = (path: string, message: string) =>
  new Errors.InvalidRequest({ error: `Invalid request body: ${path} ${message}`, issues: [{ path, message }] })
const notFound = () => new Errors.NotFound({ error: "Template not found" })

/** What a sandbox of a template is made from. */
export interface ResolvedTemplate {
  readonly id: string
  readonly root: ImageRootName
  readonly env: Readonly<Record<string, string>>
  readonly image: SandboxImage | undefined
}

const decodeStatus = Schema.decodeUnknownOption(Schema.fromJsonString(BuildStatus))
const textDecoder = new TextDecoder()

export class Templates extends Context.Service<Templates, {
  readonly create: (
    orgId: OrgId,
    request: CreateTemplateRequest
  ) => Effect.Effect<Template, Errors.InvalidRequest | Errors.Conflict | Errors.Unavailable | Rows.QueryError>
  readonly snapshot: (
    orgId: OrgId,
    sandbox: {
      readonly id: string
      readonly state: string
      readonly hostId: string | null
      readonly templateId: string
    },
    name: string
  ) => Effect.Effect<Template, Errors.InvalidRequest | Errors.Conflict | Rows.QueryError>
  readonly list: (orgId: OrgId, query: ListQuery) => Effect.Effect<TemplatePage, Rows.QueryError>
  readonly get: (orgId: OrgId, id: string) => Effect.Effect<Template, Errors.NotFound | Rows.QueryError>
  readonly logs: (
    orgId: OrgId,
    id: string,
    follow: boolean
  ) => Effect.Effect<Stream.Stream<Uint8Array>, Errors.NotFound | Rows.QueryError>
  readonly remove: (
    orgId: OrgId,
    id: string
  ) => Effect.Effect<Template, Errors.NotFound | Errors.Conflict | Rows.QueryError>
  /** `base`, `debian`, or a ready template of the org by id or name; undefined when none. */
  readonly resolve: (orgId: OrgId, ref: string) => Effect.Effect<ResolvedTemplate | undefined, Rows.QueryError>
  /** Applies the ends of builds (see the module's comment); run by `layer` every second. */
  readonly settle: Effect.Effect<void, Rows.QueryError>
  /**
   * Removes the image layers no template refers to when due (see the module's comment); run by
   * `layer` after `settle`. The layers removed.
   */
  readonly collect: Effect.Effect<ReadonlyArray<string>, Rows.QueryError>
}>()("@svc/sandboxes/Templates") {
  static readonly make = Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const hosts = yield* Hosts
    const nats = yield* Nats
    const timeout = yield* TemplateBuildTimeout
    const grace = yield* ImageGcGrace
    const builds = yield* ensureBucket(BUILDS_BUCKET_SPEC).pipe(Effect.orDie)
    const layerCache = yield* ensureBucket(LAYER_CACHE_BUCKET_SPEC).pipe(Effect.orDie)
    // Opened on first use, like the agents do.
    let store: ObjectStore | undefined
    const openStore = Effect.suspend(() =>
      store !== undefined ? Effect.succeed(store) : ensureObjectStore(IMAGES_OBJECT_STORE).pipe(
        Effect.tap((opened) => Effect.sync(() => (store = opened))),
        Effect.provideService(Nats, nats)
      )
    )
    // Due at start (what a previous process left), after a delete or a build's end, and by time.
    let collectDue = true
    let collectedAt = 0

    const find = (orgId: string, ref: string) =>
      rows(sql`SELECT ${sql.literal(COLUMNS)} FROM templates
        WHERE org_id = ${orgId} AND deleted_at IS NULL AND (id = ${ref} OR name = ${ref})
        ORDER BY (id = ${ref}) DESC LIMIT 1`).pipe(Effect.map((r) => r[0]))

    const resolve = Effect.fn("Templates.resolve")(function*(orgId: OrgId, ref: string) {
      if (ref === "base" || ref === BASE_TEMPLATE_ID) {
        return { id: BASE_TEMPLATE_ID, root: "base" as const, env: {}, image: undefined }
      }
      if (ref === "debian" || ref === DEBIAN_TEMPLATE_ID) {
        return {
          id: DEBIAN_TEMPLATE_ID,
          root: "debian" as const,
          env: {},
          image: { layers: [], startCmd: null, readyCmd: null }
        }
      }
      const row = yield* find(orgId, ref)
      if (row === undefined || row.state !== "ready") return undefined
      return {
        id: row.id,
        root: row.root,
        env: row.env,
        image: { layers: row.layers, startCmd: row.start_cmd, readyCmd: row.ready_cmd }
      } satisfies ResolvedTemplate
    })

    /** Inserts the `building` row and its host's command, in one transaction. */
    const insertBuild = (
      orgId: OrgId,
      fields: {
        readonly name: string
        readonly base: string
        readonly parent: ResolvedTemplate
        readonly steps: ReadonlyArray<TemplateStep>
        readonly startCmd: string | null
        readonly readyCmd: string | null
        readonly snapshotOf?: { readonly id: string; readonly hostId: string }
      }
    ) =>
      Effect.gen(function*() {
        let hostId = fields.snapshotOf?.hostId
        if (hostId === undefined) {
          const live = yield* hosts.live
          const placed = yield* Scheduler.place(live, { region: null, cpu: 1, ramMb: 1024, diskGb: 4 }, Date.now())
          if (placed._tag !== "Placed") {
            return yield* new Errors.Unavailable({ error: "No host can build templates right now; retry" })
          }
          hostId = placed.host.hostId
        }
        const now = Date.now()
        const id = makeTemplateId()
        const command: BuildCommand = {
          _tag: "build",
          sandboxId: id,
          orgId,
          root: fields.parent.root,
          layers: fields.parent.image?.layers ?? [],
          env: { ...fields.parent.env },
          steps: fields.steps,
          timeoutMs: Duration.toMillis(timeout),
          ...(fields.snapshotOf !== undefined ? { snapshotOf: fields.snapshotOf.id } : {})
        }
        const row = yield* sql.withTransaction(Effect.gen(function*() {
          const taken = yield* used(sql`SELECT id FROM templates
            WHERE org_id = ${orgId} AND name = ${fields.name} AND deleted_at IS NULL FOR UPDATE`)
          if (taken.length > 0 || fields.name === "base" || fields.name === "debian") {
            return yield* new Errors.Conflict({ error: `A template named ${fields.name} exists already` })
          }
          const inserted = yield* rows(sql`INSERT INTO templates
            (id, org_id, name, base, root, layers, env, steps, start_cmd, ready_cmd, state, host_id, deadline_at, created_at)
            VALUES (${id}, ${orgId}, ${fields.name}, ${fields.base}, ${fields.parent.root},
              ${JSON.stringify(command.layers)}::jsonb, ${JSON.stringify(command.env)}::jsonb,
              ${JSON.stringify(fields.steps)}::jsonb, ${fields.startCmd}, ${fields.readyCmd}, 'building', ${hostId},
              ${new Date(now + Duration.toMillis(timeout))}, ${new Date(now)})
            RETURNING ${sql.literal(COLUMNS)}`)
          yield* Outbox.append({ subject: agentSubject(hostId, "build"), payload: command }).pipe(
            Effect.catchTag("InvalidOutboxMessage", Effect.die)
          )
          return inserted[0]!
        }))
        yield* wakeIfPresent
        return toRecord(row)
      })

    const create = Effect.fn("Templates.create")(function*(orgId: OrgId, request: CreateTemplateRequest) {
      const base = request.base ?? "base"
      const parent = yield* resolve(orgId, base)
      if (parent === undefined) return yield* invalid("base", `no ready template ${JSON.stringify(base)}`)
      const parentRow = parent.id !== BASE_TEMPLATE_ID && parent.id !== DEBIAN_TEMPLATE_ID
        ? yield* find(orgId, parent.id)
        : undefined
      return yield* insertBuild(orgId, {
        name: request.name,
        base: baseName(parent.id),
        parent,
        steps: request.steps ?? [],
        // A template built on another keeps its commands unless it sets its own.
        startCmd: request.start_cmd !== undefined ? request.start_cmd : parentRow?.start_cmd ?? null,
        readyCmd: request.ready_cmd !== undefined ? request.ready_cmd : parentRow?.ready_cmd ?? null
      })
    })

    const snapshot = Effect.fn("Templates.snapshot")(function*(
      orgId: OrgId,
      sandbox: {
        readonly id: string
        readonly state: string
        readonly hostId: string | null
        readonly templateId: string
      },
      name: string
    ) {
      if (sandbox.state !== "running" || sandbox.hostId === null) {
        return yield* new Errors.Conflict({ error: `This sandbox is ${sandbox.state}; it must be running` })
      }
      const parent = (yield* resolve(orgId, sandbox.templateId)) ??
        // Its template was deleted since: its image is gone with it.
        (yield* new Errors.Conflict({ error: "The sandbox's template no longer exists" }))
      const parentRow = sandbox.templateId !== BASE_TEMPLATE_ID && sandbox.templateId !== DEBIAN_TEMPLATE_ID
        ? yield* find(orgId, sandbox.templateId)
        : undefined
      return yield* insertBuild(orgId, {
        name,
        base: baseName(sandbox.templateId),
        parent,
        steps: [],
        startCmd: parentRow?.start_cmd ?? null,
        readyCmd: parentRow?.ready_cmd ?? null,
        snapshotOf: { id: sandbox.id, hostId: sandbox.hostId }
      }).pipe(Effect.catchTag("Unavailable", (e) => Effect.die(e)))
    })

    const list = Effect.fn("Templates.list")(function*(orgId: OrgId, query: ListQuery) {
      const [count] = yield* counted(
        sql`SELECT count(*)::int AS n FROM templates WHERE org_id = ${orgId} AND deleted_at IS NULL`
      )
      const page = yield* rows(sql`SELECT ${sql.literal(COLUMNS)} FROM templates
        WHERE org_id = ${orgId} AND deleted_at IS NULL
        ORDER BY created_at DESC, id DESC LIMIT ${query.limit} OFFSET ${query.offset}`)
      const records = page.map(toRecord)
      return { rows: records, ...pageInfo(query, records.length, count?.n ?? 0) }
    })

    const get = Effect.fn("Templates.get")(function*(orgId: OrgId, id: string) {
      if (id === BASE_TEMPLATE_ID || id === "base") return BASE_RECORD()
      if (id === DEBIAN_TEMPLATE_ID || id === "debian") return DEBIAN_RECORD()
      const row = yield* find(orgId, id)
      if (row === undefined) return yield* notFound()
      return toRecord(row)
    })

    const logText = (row: Row) =>
      Effect.gen(function*() {
        if (row.build_log !== null) return row.build_log
        const entry = yield* Effect.tryPromise(() => builds.get(row.id)).pipe(Effect.orElseSucceed(() => null))
        if (entry === null || entry.operation !== "PUT") return ""
        return Option.match(decodeStatus(textDecoder.decode(entry.value)), {
          onNone: () => "",
          onSome: (s) => s.log
        })
      })

    const logs = Effect.fn("Templates.logs")(function*(orgId: OrgId, id: string, follow: boolean) {
      const first = yield* find(orgId, id)
      if (first === undefined) return yield* notFound()
      const encoder = new TextEncoder()
      if (!follow || first.state !== "building") {
        return Stream.make(encoder.encode(yield* logText(first)))
      }
      // Follow: what is new every half second, until the row leaves `building`.
      let sent = 0
      const poll = Effect.gen(function*() {
        const row = (yield* find(orgId, id).pipe(Effect.orElseSucceed(() => undefined))) ?? first
        const text = yield* logText(row)
        const chunk = text.length > sent ? text.slice(sent) : ""
        sent = Math.max(sent, text.length)
        return { chunk: encoder.encode(chunk), done: row.state !== "building" }
      })
      return Stream.unfold(false as boolean, (done) =>
        done ? Effect.succeed(undefined) : Effect.map(
          Effect.andThen(Effect.sleep(Duration.millis(sent === 0 ? 0 : 500)), poll),
          (r) => [r.chunk, r.done] as const
        )).pipe(Stream.filter((chunk) => chunk.length > 0))
    })

    const remove = Effect.fn("Templates.remove")(function*(orgId: OrgId, id: string) {
      const row = yield* find(orgId, id)
      if (row === undefined) return yield* notFound()
      const inUse = yield* used(sql`SELECT id FROM sandboxes
        WHERE org_id = ${orgId} AND template_id = ${row.id} AND state NOT IN ('deleting', 'deleted') LIMIT 1`)
      if (inUse.length > 0) {
        return yield* new Errors.Conflict({ error: `Template ${row.name} is used by sandbox ${inUse[0]!.id}` })
      }
      yield* sql`UPDATE templates SET deleted_at = now() WHERE id = ${row.id}`
      collectDue = true
      return toRecord(row)
    })

    /** Ends a build: the row and its event in one transaction, once. */
    const finish = (
      row: Row,
      end: {
        readonly state: "ready" | "failed"
        readonly layers: ReadonlyArray<string>
        readonly env: Readonly<Record<string, string>>
        readonly errorMessage: string | null
        readonly log: string
      }
    ) =>
      sql.withTransaction(Effect.gen(function*() {
        const image = end.state === "ready" ? imageDigest(row.root, end.layers) : null
        const updated = yield* used(sql`UPDATE templates SET state = ${end.state}, image = ${image},
            layers = ${JSON.stringify(end.layers)}::jsonb, env = ${JSON.stringify(end.env)}::jsonb,
            error_message = ${end.errorMessage}, build_log = ${end.log}, built_at = now()
          WHERE id = ${row.id} AND state = 'building' RETURNING id`)
        if (updated.length === 0) return
        collectDue = true
        yield* Outbox.appendEvent({
          event: "template.state_updated",
          orgId: row.org_id,
          data: { template_id: row.id, state: end.state, image }
        }).pipe(Effect.catchTag("InvalidOutboxMessage", Effect.die))
      }))

    const settle = Effect.gen(function*() {
      const building = yield* rows(sql`SELECT ${sql.literal(COLUMNS)} FROM templates WHERE state = 'building'`)
      for (const row of building) {
        const entry = yield* Effect.tryPromise(() => builds.get(row.id)).pipe(Effect.orElseSucceed(() => null))
        const status = entry === null || entry.operation !== "PUT"
          ? Option.none()
          : decodeStatus(textDecoder.decode(entry.value))
        if (Option.isSome(status) && status.value.state !== "building") {
          yield* finish(row, { ...status.value, state: status.value.state })
          continue
        }
        const log = Option.isSome(status) ? status.value.log : ""
        const base = { layers: row.layers, env: row.env, log }
        if (Date.now() > row.deadline_at.getTime()) {
          yield* finish(row, {
            ...base,
            state: "failed",
            errorMessage: `the build ran past its time limit (${Math.round(Duration.toSeconds(timeout))} s)`
          })
        } else if (row.host_id !== null && !(yield* hosts.isLive(row.host_id))) {
          yield* finish(row, { ...base, state: "failed", errorMessage: "the build's host went down" })
        }
      }
      if (building.length > 0) yield* wakeIfPresent
    }).pipe(Effect.provideService(Nats, nats), Effect.withSpan("Templates.settle"))

    const collect = Effect.gen(function*() {
      if (!collectDue && Date.now() - collectedAt < COLLECT_EVERY_MS) return []
      const building = yield* used(sql`SELECT id FROM templates WHERE state = 'building' LIMIT 1`)
      if (building.length > 0) return []
      collectDue = false
      collectedAt = Date.now()
      const referenced = yield* layerRows(sql`SELECT DISTINCT jsonb_array_elements_text(layers) AS layer
        FROM templates WHERE deleted_at IS NULL`)
      const keep = new Set(referenced.map((r) => r.layer))
      const cutoff = Date.now() - Duration.toMillis(grace)
      const removed = yield* Effect.gen(function*() {
        const objects = yield* openStore
        const listed = yield* Effect.tryPromise(() => objects.list())
        const doomed = listed
          .filter((o) => !o.deleted && LAYER_HEX.test(o.name) && !keep.has(o.name) && Date.parse(o.mtime) <= cutoff)
          .map((o) => o.name)
        if (doomed.length === 0) return []
        const gone = new Set(doomed)
        yield* Effect.tryPromise(async () => {
          const keys: Array<string> = []
          for await (const key of await layerCache.keys()) keys.push(key)
          for (const key of keys) {
            const entry = await layerCache.get(key)
            if (entry?.operation === "PUT" && gone.has(entry.string())) await layerCache.delete(key)
          }
          for (const name of doomed) await objects.delete(name)
        })
        return doomed
      }).pipe(
        Effect.catch((e) =>
          Effect.as(
            Effect.logWarning("templates: collecting image layers failed", { error: String(e) }).pipe(
              Effect.andThen(Effect.sync(() => (collectDue = true)))
            ),
            [] as ReadonlyArray<string>
          )
        )
      )
      if (removed.length > 0) yield* Effect.logInfo("templates: image layers collected", { layers: removed.length })
      return removed
    }).pipe(Effect.withSpan("Templates.collect"))

    const withSql = <A, E>(effect: Effect.Effect<A, E, SqlClient.SqlClient>) =>
      Effect.provideService(effect, SqlClient.SqlClient, sql)
    return Templates.of({
      create: (orgId, request) => withSql(create(orgId, request)),
      snapshot: (orgId, sandbox, name) => withSql(snapshot(orgId, sandbox, name)),
      list,
      get,
      logs,
      remove,
      resolve,
      settle: withSql(settle),
      collect
    })
  })

  /** The service and its settling loop (every second while the layer lives). Needs SqlClient, Nats and Hosts. */
  static readonly layer = Layer.effect(
    Templates,
    Effect.gen(function*() {
      const templates = yield* Templates.make
      yield* Effect.forkScoped(
        Effect.forever(
          Effect.andThen(
            Effect.sleep(Duration.seconds(1)),
            templates.settle.pipe(
              Effect.andThen(templates.collect),
              Effect.catchCause((cause) => Effect.logWarning("templates: settling builds failed", { cause }))
            )
          )
        )
      )
      return templates
    })
  )
}
