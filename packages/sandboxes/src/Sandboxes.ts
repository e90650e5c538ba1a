/**
 * Sandboxes as the API sees them: create (placement and the `pending` row in one
 * transaction, the actor told through the outbox), read and list (SQL on the `sandboxes`
 * table), the user commands (applied synchronously through the actor's transition, see
 * `Sandboxes/Apply.ts`), and exec and files (proxied to the host's data plane).
 *
 * Callers check the credential (scopes, the single-sandbox policy) before calling; every
 * method is confined to the given org (another org's sandbox is `not_found`).
 *
 * Decisions:
 * - `template`: the built-in `base` (by name or by its id) is the only template so far;
 *   anything else is 400 naming `template`.
 * - `volumes` and `secrets` name resources that must exist in the org: an id that is not one
 *   (missing, deleted, another org's) is 400 naming the entry (`secrets.1`, `volumes.0.volume_id`).
 * - Volumes (`Sandboxes/VolumeRefs.ts`, docs/contract.md#volumes): a local volume attached
 *   elsewhere is 409; the sandbox goes to the host of its local volumes (a local volume that has
 *   none yet is pinned to the host placement picks, which must have room for it too); each
 *   attachment gets an `attachment_id`, and the host is sent what to mount.
 * - Egress (docs/contract.md#snapshots-network-policy-and-exposed-ports): `network` and the bound secrets are part of the
 *   row; each change (create, `setNetwork`, `bindSecret`) puts the sandbox's `egress` KV entry
 *   through the outbox in its own transaction, and the deletion removes it
 *   (`Sandboxes/Egress.ts`). Both refuse a deleting or deleted sandbox (409); a binding beyond
 *   `MAX_SECRETS` is 409, a secret bound already is bound once.
 * - `parent_id` must be a sandbox of the org (400 naming `parent_id` otherwise) that is not
 *   being deleted (409).
 * - `region` null: any region; the record takes the host's region, or `any` when no host
 *   could take it.
 * - `name` defaults to the id.
 * - Org quotas (`Sandboxes/Quota.ts`): a create or a start past `SVC_ORG_MAX_SANDBOXES` or
 *   `SVC_ORG_MAX_RUNNING_SANDBOXES` is 429 `quota_exceeded`, checked under the org's row lock.
 * - Usage (`Sandboxes/UsageGate.ts`, docs/contract.md#billing): an org blocked at its hard usage
 *   limit cannot create or start a sandbox (402 `usage_limit_reached`); asked under the org's row
 *   lock, before the quotas.
 * - A sandbox no host could take ends in `error` with a message that names what it asked for,
 *   never other hosts' ids or free capacity (those go to the log).
 */
import * as Actors from "@svc/actors/Actors"
import { commit } from "@svc/actors/Commit"
import { sealEnv } from "@svc/crypto/SealedEnv"
import { SecretBox } from "@svc/crypto/SecretBox"
import { Idempotency, type Outcome } from "@svc/db/Idempotency"
import * as Rows from "@svc/db/Rows"
import * as Confinement from "@svc/domain/Confinement"
import * as Errors from "@svc/domain/Errors"
import { makeAttachmentId, makeId, type OrgId, type VolumeId } from "@svc/domain/Ids"
import type { SetTimeoutRequest } from "@svc/domain/Lifecycle"
import { pageInfo } from "@svc/domain/Pagination"
import {
  type CreateSandboxRequest,
  type ExecRequest,
  type ExecResult,
  type ListSandboxesQuery,
  MAX_SECRETS,
  type NetworkPolicyRequest,
  Sandbox,
  type SandboxPage,
  type SandboxStats,
  UNPAGINATED_CAP,
  UNPAGINATED_MAX_BYTES
} from "@svc/domain/Sandbox"
import { VOLUME_DRIVER } from "@svc/domain/Volume"
import * as Outbox from "@svc/events/Outbox"
import { wakeIfPresent } from "@svc/events/Relay"
import * as AgentClient from "@svc/hosts/AgentClient"
import { Hosts } from "@svc/hosts/Hosts"
import * as Scheduler from "@svc/hosts/Scheduler"
import type * as Splice from "@svc/hosts/Splice"
import { builtInTemplate, fromResolvedExpression, resolvedExpression, Templates } from "@svc/templates/Templates"
import { Clock, Context, Duration, Effect, Layer, Option, Schema, type Scope, Stream } from "effect"
import { SqlClient } from "effect/sql"
import type { Readable } from "node:stream"
import { QuotasConfig, TransitionTimeout } from "./Config.ts"
import { commandRefusal, SandboxActor } from "./SandboxActor.ts"
import { applyNow } from "./Sandboxes/Apply.ts"
import { egressMessage } from "./Sandboxes/Egress.ts"
import { SandboxActorState } from "./Sandboxes/Model.ts"
import * as Quota from "./Sandboxes/Quota.ts"
import { toRecord } from "./Sandboxes/Record.ts"
import { liveSecrets } from "./Sandboxes/SecretRefs.ts"
import { COLUMNS, SandboxRow, store, toStored } from "./Sandboxes/Store.ts"
import { UsageGate } from "./Sandboxes/UsageGate.ts"
import * as VolumeRefs from "./Sandboxes/VolumeRefs.ts"

export { toRecord } from "./Sandboxes/Record.ts"

/** How often a call waiting for an auto-resumed sandbox looks at its row. */
const RESUME_POLL_MS = 100

/** Why a call inside a sandbox cannot be served now. */
export type ReadyError = Errors.NotFound | Errors.Conflict | Errors.Unavailable | Rows.QueryError

export const BASE_TEMPLATE_NAME = "base"
export const ANY_REGION = "any"
/**
 * A create no host can take is refused (503 `no_capacity`) with this `Retry-After`: room frees as
 * sandboxes stop or are deleted, and a host that just started heartbeats within 2 s.
 */
export const NO_CAPACITY_RETRY_AFTER_S = 1

const invalid = (path: string, message: string) =>
  new Errors.InvalidRequest({ error: `Invalid request body: ${path} ${message}`, issues: [{ path, message }] })

const notFound = () => new Errors.NotFound({ error: "Sandbox not found" })

const corrupt = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.catchTag(
    effect as Effect.Effect<A, E | { readonly _tag: "CorruptState" }, R>,
    "CorruptState",
    (e) => Effect.die(e)
  ) as Effect.Effect<
    A,
    Exclude<E, { readonly _tag: "CorruptState" }>,
    R
  >

const encodeRecord = Schema.encodeSync(Sandbox)

const listed = Rows.decoder("Sandboxes.list", SandboxRow)
const counted = Rows.decoder("Sandboxes.count", Schema.Struct({ n: Schema.Int }))
const parentRows = Rows.decoder("Sandboxes.create", Schema.Struct({ state: SandboxActorState.fields.state }))
const descendants = Rows.decoder(
  "Sandboxes.remove",
  Schema.Struct({ id: Schema.String, host_id: Schema.NullOr(Schema.String) })
)

/**
 * An upper bound of a row's size as a JSON record, in SQL: its variable parts (jsonb renders
 * with more spaces than JSON.stringify) plus 2 KiB for the fixed ones (ids, times, numbers and
 * the field names take about 700 bytes).
 */
const ROW_BYTES_ESTIMATE = `(octet_length(metadata::text) + octet_length(volume_attachments::text) +
  octet_length(exposed_ports::text) + 2 * (octet_length(name) + coalesce(octet_length(error_message), 0) +
  coalesce(octet_length(runtime_reason), 0)) + 2048)`

export class Sandboxes extends Context.Service<Sandboxes, {
  /** With `idempotencyKey`: the same key and request within 24 h replay the first answer; another request is 422. */
  readonly create: (
    orgId: OrgId,
    request: CreateSandboxRequest,
    idempotencyKey?: string
  ) => Effect.Effect<
    Outcome<Sandbox>,
    | Errors.InvalidRequest
    | Errors.Conflict
    | Errors.IdempotencyKeyReused
    | Errors.QuotaExceeded
    | Errors.UsageLimitReached
    | Errors.NoCapacity
    | Rows.QueryError
  >
  /** The org's sandbox (its state, for policy checks), or `not_found`. */
  readonly get: (orgId: OrgId, id: string) => Effect.Effect<SandboxActorState, Errors.NotFound | Rows.QueryError>
  readonly list: (
    orgId: OrgId,
    query: ListSandboxesQuery,
    confinedTo: string | null
  ) => Effect.Effect<SandboxPage, Rows.QueryError>
  readonly start: (
    orgId: OrgId,
    id: string
  ) => Effect.Effect<
    Sandbox,
    Errors.NotFound | Errors.Conflict | Errors.QuotaExceeded | Errors.UsageLimitReached | Rows.QueryError
  >
  readonly stop: (
    orgId: OrgId,
    id: string
  ) => Effect.Effect<Sandbox, Errors.NotFound | Errors.Conflict | Rows.QueryError>
  /** Deletes it and every descendant. Idempotent. */
  readonly remove: (orgId: OrgId, id: string) => Effect.Effect<Sandbox, Errors.NotFound | Rows.QueryError>
  /** Replaces the egress policy; the record after. */
  readonly setNetwork: (
    orgId: OrgId,
    id: string,
    network: NetworkPolicyRequest
  ) => Effect.Effect<Sandbox, Errors.NotFound | Errors.Conflict | Rows.QueryError>
  /** Binds a live secret of the org (once). */
  readonly bindSecret: (
    orgId: OrgId,
    id: string,
    secretId: string
  ) => Effect.Effect<void, Errors.NotFound | Errors.Conflict | Errors.InvalidRequest | Rows.QueryError>
  readonly exec: (
    orgId: OrgId,
    id: string,
    request: ExecRequest
  ) => Effect.Effect<ExecResult, AgentClient.ExecError | Rows.QueryError>
  /** A file's bytes (from its host, until the scope closes) or a folder's listing. */
  readonly readFile: (
    orgId: OrgId,
    id: string,
    path: string
  ) => Effect.Effect<AgentClient.FileContent, AgentClient.DataPlaneError | Rows.QueryError, Scope.Scope>
  /**
   * A file management call (`api.files` of the data plane) on the running sandbox's host: `call`
   * gets the host's client and the host (docs/contract.md#files).
   */
  readonly fileOp: <A, E>(
    orgId: OrgId,
    id: string,
    call: (api: AgentClient.AgentApiClient["files"]) => Effect.Effect<A, E, AgentClient.AgentTarget>
  ) => Effect.Effect<A, AgentClient.FileOpError | Rows.QueryError>
  /** A running sandbox's usage, read from its host now. */
  readonly stats: (orgId: OrgId, id: string) => Effect.Effect<SandboxStats, AgentClient.StatsError | Rows.QueryError>
  /** A client's request body (`body`) piped to the file at `path` on its host. */
  readonly writeFile: (
    orgId: OrgId,
    id: string,
    path: string,
    body: Readable,
    maxBytes: number,
    options?: AgentClient.WriteOptions,
    client?: Splice.ClientConnection
  ) => Effect.Effect<void, AgentClient.DataPlaneError | Rows.QueryError>
  /**
   * The folder as a tar (or tar.gz) stream from the running sandbox's host (docs/contract.md#files),
   * a transfer in flight until the stream ends or the scope closes.
   */
  readonly readArchive: (
    orgId: OrgId,
    id: string,
    path: string,
    format: "tar" | "tar.gz"
  ) => Effect.Effect<
    Stream.Stream<Uint8Array, Errors.Unavailable>,
    AgentClient.DataPlaneError | Rows.QueryError,
    Scope.Scope
  >
  /**
   * The changes under `path` in the running sandbox, as server-sent events (`create`, `modify`,
   * `delete`, `move`, a last `overflow`); the stream ends when the host's watcher does.
   */
  readonly watch: (
    orgId: OrgId,
    id: string,
    path: string,
    recursive: boolean
  ) => Effect.Effect<
    Stream.Stream<{ readonly event: string; readonly data: string }>,
    AgentClient.FileOpError | Rows.QueryError
  >
  /** A tar (or tar.gz) body extracted under `path` in the running sandbox, all or nothing. */
  readonly writeArchive: <E>(
    orgId: OrgId,
    id: string,
    path: string,
    body: Stream.Stream<Uint8Array, E>,
    format: "tar" | "tar.gz"
  ) => Effect.Effect<void, AgentClient.DataPlaneError | Rows.QueryError>
  /** PUT /v1/sandboxes/{id}/timeout: sets them, counting `timeout_s` again from now (a keep-alive). */
  readonly setTimeout: (
    orgId: OrgId,
    id: string,
    request: SetTimeoutRequest
  ) => Effect.Effect<Sandbox, Errors.NotFound | Errors.Conflict | Rows.QueryError>
  /**
   * The sandbox, running, for a call that works inside it: a stopped one with `auto_resume` is
   * started (or its start by another caller awaited) and returned once it runs; otherwise 409.
   */
  readonly ready: (orgId: OrgId, id: string) => Effect.Effect<SandboxActorState, ReadyError>
}>()("@svc/sandboxes/Sandboxes") {
  static readonly make = Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const hosts = yield* Hosts
    const dataPlane = yield* AgentClient.AgentClient
    const idempotency = yield* Idempotency
    const box = yield* SecretBox
    const quotas = yield* QuotasConfig
    const usage = yield* UsageGate
    const resumeWaitMs = Duration.toMillis(yield* TransitionTimeout)

    const findSandbox = Rows.findOneOption("Sandboxes.get", {
      Request: Schema.Struct({ orgId: Schema.String, id: Schema.String }),
      Result: SandboxRow,
      execute: ({ id, orgId }) =>
        sql`SELECT ${sql.literal(COLUMNS)} FROM sandboxes WHERE id = ${id} AND org_id = ${orgId}`
    })

    const load = (orgId: string, id: string) =>
      Effect.gen(function*() {
        const row = yield* findSandbox({ orgId, id })
        if (Option.isNone(row)) return yield* notFound()
        return toStored(row.value).state
      })

    const create = Effect.fn("Sandboxes.create")(
      function*(orgId: OrgId, request: CreateSandboxRequest, idempotencyKey?: string) {
        // An org's template is read by the transaction's first statement (one round trip less).
        const builtIn = builtInTemplate(request.template)
        let live = yield* hosts.live
        if (!live.some((h) => request.region === null || h.region === request.region)) {
          // A host that registered a moment ago may not have reached the mirror yet.
          yield* hosts.refresh
          live = yield* hosts.live
        }
        const now = yield* Clock.currentTimeMillis
        const id = makeId("sandbox", now)
        // Runs once per Idempotency-Key, in the transaction that holds the key.
        const insert = Effect.gen(function*(): Effect.fn.Return<
          SandboxActorState,
          | Errors.InvalidRequest
          | Errors.Conflict
          | Errors.QuotaExceeded
          | Errors.UsageLimitReached
          | Errors.NoCapacity
          | Rows.QueryError,
          SqlClient.SqlClient
        > {
          // Holds the org's row to the commit (concurrent creates count one after the other),
          // then the placement lock, also to the commit (two creates never take the last room
          // on a host), in one statement: the org's row first, as forks take the two as well.
          const locked = yield* Quota.lockOrg(
            orgId,
            sql`, ${Scheduler.placementLock(sql)} AS placement_lock${
              builtIn === undefined ? sql`, ${resolvedExpression(sql, orgId, request.template)} AS template` : sql``
            }`
          )
          const template = builtIn ?? (yield* fromResolvedExpression(locked["template"]))
          if (template === undefined) {
            return yield* invalid("template", `no ready template ${JSON.stringify(request.template)} in this org`)
          }
          // One statement after both locks (a statement's snapshot predates the locks it takes):
          // the quota's counts, the usage gate's question and the hosts' usage for placement.
          // The gate answers first.
          const counted = yield* Quota.count(
            orgId,
            sql`, ${Scheduler.usageExpression(sql, live, request.region, now)} AS host_usage ${
              usage.columns(sql, orgId, now)
            }`
          )
          yield* usage.decide(counted.row, now)
          yield* Quota.judge(counted, quotas, "create")
          if (request.parent_id !== null) {
            const parents = yield* parentRows(sql`
            SELECT state FROM sandboxes WHERE id = ${request.parent_id} AND org_id = ${orgId} FOR SHARE`)
            if (parents.length === 0) return yield* invalid("parent_id", "no such sandbox in this org")
            const parentState = parents[0]!.state
            if (parentState === "deleting" || parentState === "deleted") {
              return yield* new Errors.Conflict({ error: `The parent sandbox is ${parentState}` })
            }
          }
          // Held FOR SHARE to the commit: a secret deleted meanwhile waits for this create.
          const secrets = yield* liveSecrets(orgId, request.secrets)
          const unknown = request.secrets.findIndex((secretId) => !secrets.has(secretId))
          if (unknown !== -1) return yield* invalid(`secrets.${unknown}`, "no such secret in this org")
          // Held FOR UPDATE to the commit: a volume's delete, or another create, waits for this one.
          const volumes = yield* VolumeRefs.plan(orgId, request.volumes)
          const placement = yield* Scheduler.placeWith(
            live,
            counted.row["host_usage"],
            {
              region: request.region,
              cpu: request.cpu,
              ramMb: request.ram_mb,
              diskGb: request.disk_gb + volumes.unpinnedGb,
              hostId: volumes.pinnedHost,
              ...(template.image !== undefined
                ? { image: { root: template.root, layers: template.image.layers } }
                : {}),
              templateId: template.id
            },
            now
          )
          const refused = placement._tag === "Unplaceable" &&
            (placement.kind === "no_room" || placement.kind === "no_host")
          if (placement._tag === "Unplaceable") {
            // The tenant sees `reason`; which hosts were full and by how much is for operators.
            yield* Effect.logWarning("sandbox unplaceable", { orgId, detail: placement.detail })
          }
          if (refused) {
            // The platform's capacity: refused before anything is written (the transaction rolls
            // back), never accepted and then turned into `error`. A region with no live host, or
            // local volumes whose host is down, is the request's: created, then `error` naming it.
            return yield* new Errors.NoCapacity({ error: placement.reason, retry_after_s: NO_CAPACITY_RETRY_AFTER_S })
          }
          const host = placement._tag === "Placed" ? placement.host : null
          if (host !== null) yield* VolumeRefs.pin(volumes.unpinned, host.hostId)
          const state: SandboxActorState = {
            id,
            orgId,
            name: request.name ?? id,
            templateId: template.id,
            templateName: template.root,
            hostId: host?.hostId ?? null,
            parentId: request.parent_id,
            state: "pending",
            type: request.type,
            region: host?.region ?? request.region ?? ANY_REGION,
            datacenter: host?.datacenter ?? null,
            agentReady: false,
            runtimeReady: false,
            runtimeReason: null,
            cpu: request.cpu,
            ramMb: request.ram_mb,
            diskGb: request.disk_gb,
            vsockCid: null,
            internalIp: null,
            // An image template's `ExposedPorts` when the create names none.
            exposedPorts: request.exposed_ports.length > 0 ? request.exposed_ports : [...template.exposedPorts],
            volumeAttachments: volumes.mounts.map((v) => ({
              volume_id: v.volumeId as VolumeId,
              type: v.type,
              driver: VOLUME_DRIVER,
              mount_path: v.mountPath,
              subpath: v.subpath,
              mode: v.mode,
              attachment_id: makeAttachmentId(),
              device_path: null
            })),
            metadata: request.metadata as SandboxActorState["metadata"],
            errorMessage: null,
            network: request.network,
            secretIds: request.secrets,
            timeoutS: request.timeout_s,
            createdAt: now,
            startedAt: null,
            stoppedAt: null,
            deletedAt: null,
            stateSince: now,
            lastReportAt: null,
            createdEmitted: false,
            idleTimeoutS: request.idle_timeout_s,
            onTimeout: request.on_timeout,
            autoDeleteS: request.auto_delete_s,
            autoResume: request.auto_resume,
            timeoutFrom: null,
            lastActivityAt: null,
            busy: false,
            stopReason: null
          }
          // Before the host hears of it: its proxy knows the policy by the first connection.
          const create = yield* Actors.outboxMessage(SandboxActor, id, {
            _tag: "Create",
            // Sealed before it reaches the outbox: the env may hold credentials. The template's
            // env first, the request's over it.
            sealedEnv: yield* sealEnv(box, "transit", id, { ...template.env, ...request.env }),
            ...(template.image !== undefined ? { image: template.image } : {}),
            unplaceable: placement._tag === "Unplaceable" ? placement.reason : null,
            ...(volumes.mounts.length > 0 ? { volumes: volumes.mounts } : {})
          }).pipe(Effect.catchTag("InvalidActorMessage", Effect.die))
          const messages = yield* Outbox.prepareAll([egressMessage(state), create]).pipe(
            Effect.catchTag("InvalidOutboxMessage", Effect.die)
          )
          // The row, its first transition in the inbox (version 1, so that the inbox stays the
          // entity's complete log) and both messages: one statement (Commit.ts), not four.
          const written = yield* corrupt(
            commit(SandboxActor, store, { id, msgId: "api:create", state, expected: undefined, messages })
          )
          if (written !== "applied") return yield* Effect.die(new Error(`sandbox id ${id} taken`))
          return state
        })
        const outcome = yield* idempotency.run({
          orgId,
          operation: "sandboxes.create",
          key: idempotencyKey,
          request,
          create: insert,
          response: (state: SandboxActorState) => encodeRecord(toRecord(state))
        })
        if (outcome._tag === "Replayed") return outcome
        yield* wakeIfPresent
        return { _tag: "Created", value: toRecord(outcome.value) } satisfies Outcome<Sandbox>
      }
    )

    const list = Effect.fn("Sandboxes.list")(
      function*(orgId: OrgId, query: ListSandboxesQuery, confinedTo: string | null) {
        const conditions = [sql`org_id = ${orgId}`]
        if (query.state !== undefined) conditions.push(sql`state = ANY(${[...query.state]}::text[])`)
        if (confinedTo !== null) conditions.push(Confinement.sqlCondition(sql, confinedTo))
        const where = sql.and(conditions)
        const [count] = yield* counted(sql`SELECT count(*)::int AS n FROM sandboxes WHERE ${where}`)
        const total = count?.n ?? 0
        if (query.paginated) {
          const rows = yield* listed(sql`
          SELECT ${sql.literal(COLUMNS)} FROM sandboxes WHERE ${where}
          ORDER BY created_at DESC, id DESC LIMIT ${query.limit} OFFSET ${query.offset}`)
          const records = rows.map((row) => toRecord(toStored(row).state))
          return { rows: records, ...pageInfo(query, records.length, total) }
        }
        // Every row, up to 10,000 and about 8 MiB of JSON: Postgres cuts the page where an upper
        // estimate of its size crosses the bound (so no more than that is ever read), then the
        // exact size of the encoded records is checked here. At least one row, so paging advances.
        const rows = yield* listed(sql`
        SELECT ${sql.literal(COLUMNS)} FROM (
          SELECT page.*,
                 row_number() OVER (ORDER BY created_at DESC, id DESC) AS n,
                 sum(${
          sql.literal(ROW_BYTES_ESTIMATE)
        }) OVER (ORDER BY created_at DESC, id DESC ROWS UNBOUNDED PRECEDING) AS upto
          FROM (
            SELECT ${sql.literal(COLUMNS)} FROM sandboxes WHERE ${where}
            ORDER BY created_at DESC, id DESC LIMIT ${UNPAGINATED_CAP} OFFSET ${query.offset}
          ) page
        ) sized
        WHERE n = 1 OR upto <= ${UNPAGINATED_MAX_BYTES}
        ORDER BY created_at DESC, id DESC`)
        const records: Array<Sandbox> = []
        let bytes = 2
        for (const row of rows) {
          const record = toRecord(toStored(row).state)
          bytes += Buffer.byteLength(JSON.stringify(encodeRecord(record))) + 1
          if (records.length > 0 && bytes > UNPAGINATED_MAX_BYTES) break
          records.push(record)
        }
        return { rows: records, ...pageInfo({ offset: query.offset, limit: records.length }, records.length, total) }
      }
    )

    const command = (tag: "Start" | "Stop") =>
      Effect.fn(`Sandboxes.${tag.toLowerCase()}`)(function*(orgId: OrgId, id: string) {
        const next = yield* applyNow(orgId, id, (s) => {
          const why = commandRefusal(s, tag)
          return why === null
            ? Effect.succeed({ _tag: tag })
            : Effect.fail(new Errors.Conflict({ error: `This sandbox is ${s.state}: ${why}` }))
        })
        yield* wakeIfPresent
        return toRecord(next)
      })

    /**
     * Start, within the org's running quota. The org's quota lock is taken before the sandbox's
     * row lock, as a create takes it before a parent's row: the same order everywhere, no deadlock.
     */
    const startWithinQuota = Effect.fn("Sandboxes.start")(function*(orgId: OrgId, id: string) {
      const next = yield* sql.withTransaction(Effect.andThen(
        Quota.lockOrg(orgId),
        applyNow(orgId, id, (s) =>
          Effect.gen(function*() {
            const why = commandRefusal(s, "Start")
            if (why !== null) return yield* new Errors.Conflict({ error: `This sandbox is ${s.state}: ${why}` })
            yield* usage.admit(orgId)
            yield* Quota.check(orgId, quotas, "start")
            return { _tag: "Start" as const }
          }))
      ))
      yield* wakeIfPresent
      return toRecord(next)
    })

    const remove = Effect.fn("Sandboxes.remove")(function*(orgId: OrgId, id: string) {
      const next = yield* applyNow(orgId, id, (s) =>
        Effect.gen(function*() {
          if (s.state === "deleting" || s.state === "deleted") {
            return { _tag: "Delete" as const, hostLive: true, children: [] }
          }
          // Under the row lock: a child inserted concurrently (it holds the parent FOR SHARE)
          // committed before this read, so it is in the list.
          const rows = yield* descendants(sql`
            WITH RECURSIVE tree AS (
              SELECT id FROM sandboxes WHERE parent_id = ${s.id}
              UNION SELECT c.id FROM sandboxes c JOIN tree t ON c.parent_id = t.id
            )
            SELECT s.id, s.host_id FROM tree JOIN sandboxes s ON s.id = tree.id
            WHERE s.state NOT IN ('deleting', 'deleted')`)
          const liveness = (hostId: string | null) => (hostId === null ? Effect.succeed(false) : hosts.isLive(hostId))
          const children = yield* Effect.forEach(rows, (r) =>
            Effect.map(liveness(r.host_id), (hostLive) => ({ id: r.id, hostLive })))
          return { _tag: "Delete" as const, hostLive: yield* liveness(s.hostId), children }
        }))
      yield* wakeIfPresent
      return toRecord(next)
    })

    const notGone = (s: SandboxActorState) =>
      s.state === "deleting" || s.state === "deleted"
        ? Effect.fail(new Errors.Conflict({ error: `This sandbox is ${s.state}` }))
        : Effect.void

    const setNetwork = Effect.fn("Sandboxes.setNetwork")(
      function*(orgId: OrgId, id: string, network: NetworkPolicyRequest) {
        const next = yield* applyNow(orgId, id, (s) => Effect.as(notGone(s), { _tag: "SetNetwork" as const, network }))
        yield* wakeIfPresent
        return toRecord(next)
      }
    )

    const bindSecret = Effect.fn("Sandboxes.bindSecret")(function*(orgId: OrgId, id: string, secretId: string) {
      yield* applyNow(orgId, id, (s) =>
        Effect.gen(function*() {
          yield* notGone(s)
          const live = yield* liveSecrets(orgId, [secretId])
          if (!live.has(secretId)) return yield* invalid("secret_id", "no such secret in this org")
          if (!s.secretIds.includes(secretId) && s.secretIds.length >= MAX_SECRETS) {
            return yield* new Errors.Conflict({ error: `A sandbox can have at most ${MAX_SECRETS} secrets` })
          }
          return { _tag: "BindSecret" as const, secretId }
        }))
      yield* wakeIfPresent
    })

    const setTimeout = Effect.fn("Sandboxes.setTimeout")(
      function*(orgId: OrgId, id: string, request: SetTimeoutRequest) {
        const next = yield* applyNow(orgId, id, (s) =>
          Effect.as(notGone(s), {
            _tag: "SetTimeout" as const,
            ...(request.timeout_s !== undefined ? { timeoutS: request.timeout_s } : {}),
            ...(request.idle_timeout_s !== undefined ? { idleTimeoutS: request.idle_timeout_s } : {})
          }))
        yield* wakeIfPresent
        return toRecord(next)
      }
    )

    const mustRun = (s: SandboxActorState) =>
      new Errors.Conflict({ error: `This sandbox is ${s.state}; it must be running` })

    /**
     * Running, or started for the call (`auto_resume`). Concurrent callers share one start: the
     * row lock lets one `Start` through, the others find it `starting` and wait with it (every
     * caller polls the row until it runs, fails, or the transition timeout passes).
     */
    const ready = (orgId: OrgId, id: string): Effect.Effect<SandboxActorState, ReadyError> =>
      Effect.gen(function*() {
        const first = yield* load(orgId, id)
        if (first.state === "running" && first.hostId !== null) return first
        if (!first.autoResume) return yield* mustRun(first)
        if (first.state === "stopped") {
          yield* startWithinQuota(orgId, first.id).pipe(
            Effect.provideService(SqlClient.SqlClient, sql),
            // Started by another caller in the meantime: wait for it like them.
            Effect.catchTag("Conflict", () => Effect.void),
            // The call's own answers are those of a stopped sandbox: 409, saying why it stays so.
            Effect.catchTags({
              QuotaExceeded: (e) => Effect.fail(new Errors.Conflict({ error: `This sandbox is stopped: ${e.error}` })),
              UsageLimitReached: (e) =>
                Effect.fail(new Errors.Conflict({ error: `This sandbox is stopped: ${e.error}` }))
            })
          )
        } else if (first.state !== "starting" && first.state !== "pending") {
          return yield* mustRun(first)
        }
        const deadline = (yield* Clock.currentTimeMillis) + resumeWaitMs
        while (true) {
          const s = yield* load(orgId, id)
          if (s.state === "running" && s.hostId !== null) return s
          if (s.state !== "starting" && s.state !== "pending") return yield* mustRun(s)
          if ((yield* Clock.currentTimeMillis) > deadline) {
            return yield* new Errors.Unavailable({ error: "The sandbox did not start in time; retry" })
          }
          yield* Effect.sleep(RESUME_POLL_MS)
        }
      }).pipe(Effect.withSpan("Sandboxes.ready"))

    /** The sandbox's host record, when it is running (or resumed; 409 otherwise). */
    const running = (orgId: OrgId, id: string) =>
      Effect.gen(function*() {
        const s = yield* ready(orgId, id)
        if (s.hostId === null) return yield* mustRun(s)
        const host = yield* hosts.get(s.hostId)
        if (Option.isNone(host)) {
          return yield* new Errors.Unavailable({ error: "The sandbox's host is not known right now; retry" })
        }
        return host.value
      })

    const exec = Effect.fn("Sandboxes.exec")(function*(orgId: OrgId, id: string, request: ExecRequest) {
      const host = yield* running(orgId, id)
      const result = yield* dataPlane.exec(host, id, {
        cmd: request.cmd,
        ...(request.cwd !== undefined ? { cwd: request.cwd } : {}),
        ...(request.env !== undefined ? { env: request.env } : {}),
        ...(request.stdin !== undefined ? { stdin: request.stdin } : {}),
        timeout_ms: request.timeout_ms
      })
      return {
        ...result,
        duration_ms: Math.max(0, Math.round(result.duration_ms)),
        truncated: result.truncated ?? false
      }
    })

    const stats = Effect.fn("Sandboxes.stats")(function*(orgId: OrgId, id: string) {
      // Reading its usage is not a call that works inside it: no resume.
      const s = yield* load(orgId, id)
      if (s.state !== "running" || s.hostId === null) return yield* mustRun(s)
      const host = yield* running(orgId, id)
      return yield* dataPlane.stats(host, id)
    })

    const readFile = Effect.fn("Sandboxes.readFile")(function*(orgId: OrgId, id: string, path: string) {
      const host = yield* running(orgId, id)
      return yield* dataPlane.readFile(host, id, path, orgId)
    })

    const fileOp = <A, E>(
      orgId: OrgId,
      id: string,
      call: (api: AgentClient.AgentApiClient["files"]) => Effect.Effect<A, E, AgentClient.AgentTarget>
    ) =>
      Effect.gen(function*() {
        const host = yield* running(orgId, id)
        return yield* dataPlane.files(host, call(dataPlane.api.files))
      }).pipe(Effect.withSpan("Sandboxes.fileOp"))

    const writeFile = (
      orgId: OrgId,
      id: string,
      path: string,
      body: Readable,
      maxBytes: number,
      options?: AgentClient.WriteOptions,
      client?: Splice.ClientConnection
    ) =>
      Effect.gen(function*() {
        const host = yield* running(orgId, id)
        return yield* dataPlane.writeFile(host, id, path, body, maxBytes, orgId, options, client)
      }).pipe(Effect.withSpan("Sandboxes.writeFile"))

    const readArchive = Effect.fn("Sandboxes.readArchive")(
      function*(orgId: OrgId, id: string, path: string, format: "tar" | "tar.gz") {
        const host = yield* running(orgId, id)
        return yield* dataPlane.readArchive(host, id, path, format, orgId)
      }
    )

    const watch = Effect.fn("Sandboxes.watch")(function*(orgId: OrgId, id: string, path: string, recursive: boolean) {
      const host = yield* running(orgId, id)
      const events = yield* dataPlane.files(
        host,
        dataPlane.api.files.watch({ params: { id }, query: { path, recursive: recursive ? "true" : "false" } })
      )
      return events.pipe(
        Stream.provideService(AgentClient.AgentTarget, host),
        Stream.map((e) => ({ event: e.event, data: e.data })),
        // The host went away: the stream ends, as when the sandbox stops.
        Stream.catchCause((cause) =>
          Stream.fromEffectDrain(
            Effect.logWarning("data plane: a watch stream was cut", { hostId: host.hostId, cause: String(cause) })
          )
        )
      )
    })

    const writeArchive = <E>(
      orgId: OrgId,
      id: string,
      path: string,
      body: Stream.Stream<Uint8Array, E>,
      format: "tar" | "tar.gz"
    ) =>
      Effect.gen(function*() {
        const host = yield* running(orgId, id)
        return yield* dataPlane.writeArchive(host, id, path, body, format, orgId)
      }).pipe(Effect.withSpan("Sandboxes.writeArchive"))

    // The service's own connection pool, so callers need not provide one.
    const withSql = <A, E>(effect: Effect.Effect<A, E, SqlClient.SqlClient>) =>
      Effect.provideService(effect, SqlClient.SqlClient, sql)
    const start = startWithinQuota
    const stop = command("Stop")
    return Sandboxes.of({
      create: (orgId, request, idempotencyKey) => withSql(create(orgId, request, idempotencyKey)),
      get: (orgId, id) => load(orgId, id),
      list,
      start: (orgId, id) => withSql(start(orgId, id)),
      stop: (orgId, id) => withSql(stop(orgId, id)),
      remove: (orgId, id) => withSql(remove(orgId, id)),
      setNetwork: (orgId, id, network) => withSql(setNetwork(orgId, id, network)),
      bindSecret: (orgId, id, secretId) => withSql(bindSecret(orgId, id, secretId)),
      exec,
      readFile,
      fileOp,
      stats,
      writeFile,
      setTimeout: (orgId, id, request) => withSql(setTimeout(orgId, id, request)),
      ready: (orgId, id) => withSql(ready(orgId, id)),
      readArchive,
      writeArchive,
      watch
    })
  })

  /**
   * Needs `SqlClient`, `Hosts`, `SecretBox` (the Idempotency-Key entries and the env are sealed)
   * and `UsageGate`.
   */
  static readonly layer = Layer.effect(Sandboxes, Sandboxes.make).pipe(
    Layer.provide(Layer.mergeAll(Idempotency.layer, AgentClient.AgentClient.layer, Templates.layer))
  )
}
