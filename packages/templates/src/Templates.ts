/**
 * Templates as the API sees them (docs/contract.md#templates): create (the `building` row and
 * the host's `build` command through the outbox, in one transaction), snapshot (the same, its
 * build reading a running sandbox's writable layer), list, get, logs, delete (409 while a live
 * sandbox uses it), and what a sandbox create needs of a template (`resolve`). The layer also
 * runs, every second, the settling of builds (`Settle.ts`) and then image collection
 * (`Collect.ts`); the rows are `Store.ts`'s, the settings `Config.ts`'s.
 */
import { Nats } from "@svc/bus/Nats"
import { ensureObjectStore, type ObjectStore } from "@svc/bus/Objects"
import { SecretBox } from "@svc/crypto/SecretBox"
import { RowDecodeError } from "@svc/db/Rows"
import type * as Rows from "@svc/db/Rows"
import * as Errors from "@svc/domain/Errors"
import { BASE_TEMPLATE_ID, CODE_TEMPLATE_ID, DEBIAN_TEMPLATE_ID, makeTemplateId, type OrgId } from "@svc/domain/Ids"
import { formatImageReference, type ImageReference, parseImageReference } from "@svc/domain/ImageReference"
import { type ListQuery, pageInfo } from "@svc/domain/Pagination"
import { parseSecretDestination, secretDestinationMatches } from "@svc/domain/Secret"
import type { CreateTemplateRequest, Template, TemplatePage, UpdateTemplateRequest } from "@svc/domain/Template"
import * as Outbox from "@svc/events/Outbox"
import { wakeIfPresent } from "@svc/events/Relay"
import {
  type BuildCommand,
  type BuildImageSource,
  type BuildStep,
  type ImageRootName,
  IMAGES_OBJECT_STORE,
  type SandboxImage
} from "@svc/host-protocol/Images"
import { agentSubject } from "@svc/host-protocol/Protocol"
import { Hosts } from "@svc/hosts/Hosts"
import * as Scheduler from "@svc/hosts/Scheduler"
import * as SecretsStore from "@svc/secrets/Secrets/Store"
import { Context, Duration, Effect, Layer, Option, Result, Schema, Stream } from "effect"
import { SqlClient } from "effect/sql"
import * as Collect from "./Collect.ts"
import { TemplateBuildTimeout } from "./Config.ts"
import { checkContext } from "./Context.ts"
import { parseDockerfile } from "./Dockerfile.ts"
import * as Pools from "./Pools.ts"
import * as Settle from "./Settle.ts"
import {
  BASE_RECORD,
  baseName,
  CODE_RECORD,
  COLUMNS,
  counted,
  DEBIAN_RECORD,
  find as findRow,
  isBuiltIn,
  Row,
  rows,
  toRecord,
  used
} from "./Store.ts"

const invalid = (path: string, message: string) =>
  new Errors.InvalidRequest({ error: `Invalid request body: ${path} ${message}`, issues: [{ path, message }] })
const notFound = () => new Errors.NotFound({ error: "Template not found" })

/** What a sandbox of a template is made from. */
export interface ResolvedTemplate {
  readonly id: string
  readonly root: ImageRootName
  readonly env: Readonly<Record<string, string>>
  readonly image: SandboxImage | undefined
  /** The default exposed ports of its sandboxes (an image's `ExposedPorts`). */
  readonly exposedPorts: ReadonlyArray<number>
}

/** `base`, `debian` or `code` (by name or id), known without a query; undefined for any other ref. */
export const builtInTemplate = (ref: string): ResolvedTemplate | undefined => {
  if (ref === "base" || ref === BASE_TEMPLATE_ID) {
    return { id: BASE_TEMPLATE_ID, root: "base" as const, env: {}, image: undefined, exposedPorts: [] }
  }
  if (ref === "debian" || ref === DEBIAN_TEMPLATE_ID) {
    return {
      id: DEBIAN_TEMPLATE_ID,
      root: "debian" as const,
      env: {},
      image: { layers: [], startCmd: null, readyCmd: null },
      exposedPorts: []
    }
  }
  if (ref === "code" || ref === CODE_TEMPLATE_ID) {
    return {
      id: CODE_TEMPLATE_ID,
      root: "code" as const,
      env: {},
      image: { layers: [], startCmd: null, readyCmd: null },
      exposedPorts: []
    }
  }
  return undefined
}

/** What of a row a sandbox's create needs (`resolvedExpression`'s JSON object). */
const ResolvedRow = Schema.Struct({
  id: Row.fields.id,
  root: Row.fields.root,
  layers: Row.fields.layers,
  env: Row.fields.env,
  start_cmd: Row.fields.start_cmd,
  ready_cmd: Row.fields.ready_cmd,
  state: Row.fields.state,
  workdir: Row.fields.workdir,
  run_as: Row.fields.run_as,
  exposed_ports: Row.fields.exposed_ports
})
const decodeResolvedRow = Schema.decodeUnknownEffect(Schema.NullOr(ResolvedRow))

const toResolved = (row: typeof ResolvedRow.Type): ResolvedTemplate => ({
  id: row.id,
  root: row.root,
  env: row.env,
  image: {
    layers: row.layers,
    startCmd: row.start_cmd,
    readyCmd: row.ready_cmd,
    ...(row.workdir !== null ? { workdir: row.workdir } : {}),
    ...(row.run_as !== null ? { user: row.run_as } : {})
  },
  exposedPorts: row.exposed_ports
})

/**
 * The org's live template `ref` (not a built-in one) as one expression, a JSON object or null,
 * for a statement the caller runs anyway (the sandbox create's first statement: one round trip
 * less than `resolve`). Decoded by `fromResolvedExpression`.
 */
export const resolvedExpression = (sql: SqlClient.SqlClient, orgId: string, ref: string) =>
  sql`(SELECT json_build_object('id', id, 'root', root, 'layers', layers, 'env', env, 'start_cmd', start_cmd,
      'ready_cmd', ready_cmd, 'state', state, 'workdir', workdir, 'run_as', run_as, 'exposed_ports', exposed_ports)
    FROM templates WHERE org_id = ${orgId} AND deleted_at IS NULL AND (id = ${ref} OR name = ${ref})
    ORDER BY (id = ${ref}) DESC LIMIT 1)`

/** `resolve`'s answer from `resolvedExpression`'s value: undefined when none is ready. */
export const fromResolvedExpression = (
  value: unknown
): Effect.Effect<ResolvedTemplate | undefined, Rows.RowDecodeError> =>
  decodeResolvedRow(value ?? null).pipe(
    Effect.mapError((e) => new RowDecodeError({ query: "Templates.resolvedExpression", message: e.message })),
    Effect.map((row) => row === null || row.state !== "ready" ? undefined : toResolved(row))
  )

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
  /** PATCH: sets `pool_size`; the hosts grow or drain the pool (`Pools.ts`). `base`, `debian` and `code`: 409. */
  readonly update: (
    orgId: OrgId,
    id: string,
    request: UpdateTemplateRequest
  ) => Effect.Effect<Template, Errors.NotFound | Errors.Conflict | Rows.QueryError>
  /** `base`, `debian`, `code`, or a ready template of the org by id or name; undefined when none. */
  readonly resolve: (orgId: OrgId, ref: string) => Effect.Effect<ResolvedTemplate | undefined, Rows.QueryError>
  /** Applies the ends of builds (see the module's comment); run by `layer` every second. */
  readonly settle: Effect.Effect<void, Rows.QueryError>
  /**
   * Removes the image layers no template refers to when due (see the module's comment); run by
   * `layer` after `settle`. The layers removed.
   */
  readonly collect: Effect.Effect<ReadonlyArray<string>, Rows.QueryError>
}>()("@svc/templates/Templates") {
  static readonly make = Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const hosts = yield* Hosts
    const timeout = yield* TemplateBuildTimeout
    const box = yield* SecretBox
    const collector = yield* Collect.make
    const settler = yield* Settle.make(collector.due)

    const find = (orgId: string, ref: string) => findRow(sql, orgId, ref)
    const nats = yield* Nats
    // The image store, opened on first use (a Dockerfile's context goes there).
    let store: ObjectStore | undefined
    const openStore = Effect.suspend(() =>
      store !== undefined ? Effect.succeed(store) : ensureObjectStore(IMAGES_OBJECT_STORE).pipe(
        Effect.tap((opened) => Effect.sync(() => (store = opened))),
        Effect.provideService(Nats, nats)
      )
    )

    const resolve = Effect.fn("Templates.resolve")(function*(orgId: OrgId, ref: string) {
      const builtIn = builtInTemplate(ref)
      if (builtIn !== undefined) return builtIn
      const row = yield* find(orgId, ref)
      if (row === undefined || row.state !== "ready") return undefined
      return toResolved(row)
    })

    /** Inserts the `building` row and its host's command, in one transaction. */
    const insertBuild = (
      orgId: OrgId,
      fields: {
        readonly name: string
        readonly base: string
        readonly parent: ResolvedTemplate
        readonly steps: ReadonlyArray<BuildStep>
        readonly startCmd: string | null
        readonly readyCmd: string | null
        readonly snapshotOf?: { readonly id: string; readonly hostId: string }
        readonly poolSize?: number
        /** An OCI image pulled as the base (its reference as the record shows it). */
        readonly image?: { readonly source: BuildImageSource; readonly ref: string }
        /** A Dockerfile's context in the image store (its sha256, hex). */
        readonly contextObject?: string
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
          ...(fields.snapshotOf !== undefined ? { snapshotOf: fields.snapshotOf.id } : {}),
          ...(fields.image !== undefined ? { image: fields.image.source } : {}),
          ...(fields.contextObject !== undefined ? { contextObject: fields.contextObject } : {}),
          runAs: { workdir: fields.parent.image?.workdir ?? null, user: fields.parent.image?.user ?? null }
        }
        // A template on another runs as it does (its cwd, user and ports) until a pull says otherwise.
        const parentImage = fields.parent.image
        const workdir = parentImage?.workdir ?? null
        const runAs = parentImage?.user ?? null
        const row = yield* sql.withTransaction(Effect.gen(function*() {
          const taken = yield* used(sql`SELECT id FROM templates
            WHERE org_id = ${orgId} AND name = ${fields.name} AND deleted_at IS NULL FOR UPDATE`)
          if (taken.length > 0 || fields.name === "base" || fields.name === "debian" || fields.name === "code") {
            return yield* new Errors.Conflict({ error: `A template named ${fields.name} exists already` })
          }
          const inserted = yield* rows(sql`INSERT INTO templates
            (id, org_id, name, base, root, layers, env, steps, start_cmd, ready_cmd, state, host_id, deadline_at, created_at,
              pool_size, image_ref, workdir, run_as, exposed_ports)
            VALUES (${id}, ${orgId}, ${fields.name}, ${fields.base}, ${fields.parent.root},
              ${JSON.stringify(command.layers)}::jsonb, ${JSON.stringify(command.env)}::jsonb,
              ${JSON.stringify(fields.steps)}::jsonb, ${fields.startCmd}, ${fields.readyCmd}, 'building', ${hostId},
              ${new Date(now + Duration.toMillis(timeout))}, ${new Date(now)}, ${fields.poolSize ?? 0},
              ${fields.image?.ref ?? null}, ${workdir}, ${runAs}, ${JSON.stringify(fields.parent.exposedPorts)}::jsonb)
            RETURNING ${sql.literal(COLUMNS)}`)
          yield* Outbox.append({ subject: agentSubject(hostId, "build"), payload: command }).pipe(
            Effect.catchTag("InvalidOutboxMessage", Effect.die)
          )
          return inserted[0]!
        }))
        yield* wakeIfPresent
        return toRecord(row)
      })

    /** The registry secret as the build carries it: only for a registry its `allowed_hosts` names. */
    const registrySecret = Effect.fn("Templates.registrySecret")(function*(
      orgId: OrgId,
      ref: string,
      image: ImageReference
    ) {
      const found = yield* SecretsStore.findSealed(orgId, ref)
      if (Option.isNone(found)) return yield* invalid("registry_secret", `no secret ${JSON.stringify(ref)} in this org`)
      const secret = found.value
      const names = secret.allowed_hosts.some((text) => {
        const entry = parseSecretDestination(text)
        return Result.isSuccess(entry) &&
          secretDestinationMatches(entry.success, { scheme: "https", host: image.hostname, port: image.port })
      })
      if (!names) {
        return yield* invalid(
          "registry_secret",
          `the secret's allowed_hosts does not name the registry ${image.registry}; it is sent nowhere else`
        )
      }
      return { id: secret.id, sealedValue: secret.sealed_value, allowedHosts: secret.allowed_hosts }
    })

    /** A build whose base is the OCI image `text` (its own steps and commands over it). */
    const createFromImage = Effect.fn("Templates.createFromImage")(function*(
      orgId: OrgId,
      request: CreateTemplateRequest,
      text: string,
      steps: ReadonlyArray<BuildStep>,
      path: string,
      extra: { readonly contextObject?: string; readonly startCmd?: string | null; readonly readyCmd?: string | null } =
        {}
    ) {
      const parsed = parseImageReference(text)
      if (Result.isFailure(parsed)) return yield* invalid(path, parsed.failure)
      const secret = request.registry_secret !== undefined
        ? yield* registrySecret(orgId, request.registry_secret, parsed.success)
        : undefined
      const parent = (yield* resolve(orgId, "base"))!
      return yield* insertBuild(orgId, {
        name: request.name,
        base: "base",
        parent,
        steps,
        startCmd: request.start_cmd ?? extra.startCmd ?? null,
        readyCmd: request.ready_cmd ?? extra.readyCmd ?? null,
        ...(extra.contextObject !== undefined ? { contextObject: extra.contextObject } : {}),
        image: {
          ref: formatImageReference(parsed.success),
          source: { ref: text, ...(secret !== undefined ? { secret } : {}) }
        }
      })
    })

    /** A build from a Dockerfile: its FROM as the base (an image, or a template), its lines as steps. */
    const createFromDockerfile = Effect.fn("Templates.createFromDockerfile")(function*(
      orgId: OrgId,
      request: CreateTemplateRequest,
      text: string
    ) {
      const parsed = parseDockerfile(text, request.build_args ?? {})
      if (parsed._tag === "Issues") {
        const first = parsed.issues[0]!
        return yield* new Errors.InvalidRequest({
          error: `Invalid Dockerfile: ${first.path} ${first.message}`,
          issues: parsed.issues.slice(0, 50)
        })
      }
      const { from, steps: lines, readyCmd, usesContext } = parsed.value
      const steps: ReadonlyArray<BuildStep> = [...lines, ...(request.steps ?? [])]
      let contextObject: string | undefined
      if (usesContext) {
        if (request.context === undefined) {
          return yield* invalid("context", "the Dockerfile copies files: give its context")
        }
        const checked = checkContext(request.context)
        if (checked._tag === "Refused") return yield* invalid("context", checked.message)
        const objects = yield* openStore.pipe(
          Effect.mapError(() => new Errors.Unavailable({ error: "The image store is unreachable; retry" }))
        )
        yield* Effect.tryPromise(async () => {
          if ((await objects.info(checked.hex)) === null) await objects.putBlob({ name: checked.hex }, checked.bytes)
        }).pipe(Effect.mapError(() => new Errors.Unavailable({ error: "The image store is unreachable; retry" })))
        contextObject = checked.hex
      }
      // A CMD or ENTRYPOINT in the Dockerfile decides the start command (on the host, with the image's).
      const setsStart = lines.some((step) => "cmd" in step || "entrypoint" in step)
      const parent = yield* resolve(orgId, from)
      if (parent === undefined) {
        if (Result.isFailure(parseImageReference(from))) {
          return yield* new Errors.InvalidRequest({
            error: `Invalid Dockerfile: FROM ${from} is no image, base, debian or ready template`,
            issues: [{
              path: "dockerfile:FROM",
              message: `no image, base, debian or ready template ${JSON.stringify(from)}`
            }]
          })
        }
        return yield* createFromImage(orgId, request, from, steps, "dockerfile", {
          ...(contextObject !== undefined ? { contextObject } : {}),
          ...(readyCmd !== undefined ? { readyCmd } : {})
        })
      }
      if (request.registry_secret !== undefined) {
        return yield* invalid("registry_secret", "the Dockerfile's FROM is no image")
      }
      const parentRow = parent.id !== BASE_TEMPLATE_ID && parent.id !== DEBIAN_TEMPLATE_ID
        ? yield* find(orgId, parent.id)
        : undefined
      return yield* insertBuild(orgId, {
        name: request.name,
        base: baseName(parent.id),
        parent,
        steps,
        startCmd: request.start_cmd !== undefined ? request.start_cmd : setsStart ? null : parentRow?.start_cmd ?? null,
        readyCmd: request.ready_cmd !== undefined
          ? request.ready_cmd
          : readyCmd !== undefined
          ? readyCmd
          : parentRow?.ready_cmd ?? null,
        ...(contextObject !== undefined ? { contextObject } : {})
      })
    })

    const create = Effect.fn("Templates.create")(function*(orgId: OrgId, request: CreateTemplateRequest) {
      const sources = (["base", "image", "dockerfile"] as const).filter((key) => request[key] !== undefined)
      if (sources.length > 1) {
        return yield* invalid(sources[1]!, `at most one of base, image, dockerfile (${sources.join(" and ")} given)`)
      }
      if (request.registry_secret !== undefined && request.image === undefined && request.dockerfile === undefined) {
        return yield* invalid("registry_secret", "only with image or dockerfile")
      }
      if (request.image !== undefined) {
        return yield* createFromImage(orgId, request, request.image, request.steps ?? [], "image")
      }
      if (request.dockerfile !== undefined) return yield* createFromDockerfile(orgId, request, request.dockerfile)
      if (request.context !== undefined || request.build_args !== undefined) {
        return yield* invalid(request.context !== undefined ? "context" : "build_args", "only with dockerfile")
      }
      const base = request.base ?? "base"
      const parent = yield* resolve(orgId, base)
      if (parent === undefined) return yield* invalid("base", `no ready template ${JSON.stringify(base)}`)
      const parentRow = !isBuiltIn(parent.id)
        ? yield* find(orgId, parent.id)
        : undefined
      return yield* insertBuild(orgId, {
        name: request.name,
        base: baseName(parent.id),
        parent,
        steps: request.steps ?? [],
        // A template built on another keeps its commands unless it sets its own.
        startCmd: request.start_cmd !== undefined ? request.start_cmd : parentRow?.start_cmd ?? null,
        readyCmd: request.ready_cmd !== undefined ? request.ready_cmd : parentRow?.ready_cmd ?? null,
        poolSize: request.pool_size ?? 0
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
      const parentRow = !isBuiltIn(sandbox.templateId)
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
      if (id === CODE_TEMPLATE_ID || id === "code") return CODE_RECORD()
      const row = yield* find(orgId, id)
      if (row === undefined) return yield* notFound()
      return toRecord(row)
    })

    const logText = settler.log

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
      yield* sql.withTransaction(Effect.gen(function*() {
        yield* sql`UPDATE templates SET deleted_at = now() WHERE id = ${row.id}`
        // Its warm pool is drained by its host.
        if (row.pool_size > 0) {
          yield* Outbox.append(yield* Pools.poolMessage(box, { ...row, pool_size: 0 }, null)).pipe(
            Effect.catchTag("InvalidOutboxMessage", Effect.die)
          )
        }
      }))
      yield* wakeIfPresent
      collector.due()
      return toRecord(row)
    })

    const update = Effect.fn("Templates.update")(function*(orgId: OrgId, id: string, request: UpdateTemplateRequest) {
      if (
        id === BASE_TEMPLATE_ID || id === "base" || id === DEBIAN_TEMPLATE_ID || id === "debian" ||
        id === CODE_TEMPLATE_ID || id === "code"
      ) {
        return yield* new Errors.Conflict({
          error: "The built-in templates have no pool_size: each host's own pool serves base"
        })
      }
      const first = yield* find(orgId, id)
      if (first === undefined) return yield* notFound()
      const live = yield* hosts.live
      const row = yield* sql.withTransaction(Effect.gen(function*() {
        // Under the row's lock: the hosts see the pool's changes in commit order.
        const locked = yield* rows(sql`SELECT ${sql.literal(COLUMNS)} FROM templates
          WHERE id = ${first.id} AND deleted_at IS NULL FOR UPDATE`)
        if (locked.length === 0) return yield* notFound()
        const current = locked[0]!
        const next = { ...current, pool_size: request.pool_size }
        const hostId = next.pool_size > 0 ? yield* Pools.chooseHost(next, live) : current.pool_host_id
        const updated = yield* rows(sql`UPDATE templates SET pool_size = ${next.pool_size}, pool_host_id = ${hostId}
          WHERE id = ${current.id} RETURNING ${sql.literal(COLUMNS)}`)
        if (current.state === "ready" && (current.pool_size > 0 || next.pool_size > 0)) {
          yield* Outbox.append(yield* Pools.poolMessage(box, updated[0]!, hostId)).pipe(
            Effect.catchTag("InvalidOutboxMessage", Effect.die)
          )
        }
        return updated[0]!
      }))
      yield* wakeIfPresent
      return toRecord(row)
    })

    const withSql = <A, E>(effect: Effect.Effect<A, E, SqlClient.SqlClient>) =>
      Effect.provideService(effect, SqlClient.SqlClient, sql)
    return Templates.of({
      create: (orgId, request) => withSql(create(orgId, request)),
      snapshot: (orgId, sandbox, name) => withSql(snapshot(orgId, sandbox, name)),
      list,
      get,
      logs,
      remove: (orgId, id) => withSql(remove(orgId, id)),
      update: (orgId, id, request) => withSql(update(orgId, id, request)),
      resolve,
      settle: settler.settle,
      collect: collector.collect
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
