/**
 * Forks (docs/contract.md#lifecycle-timeouts-idleness-resume-fork, docs/architecture.md#forks):
 * `count` new sandboxes whose file system starts as a copy of a running sandbox's.
 *
 * 1. The source is read (404 / 409 unless running on a known host) and the quotas pre-checked
 *    (429 before any copy is made).
 * 2. Its host copies the source's writable layer once into a layer named for this request
 *    (the data plane's `forkSnapshot`, synchronous: the forks hold what the source held when the
 *    request was answered, whatever it writes afterwards).
 * 3. One transaction, as a create's: the org's row and the placement lock, the usage gate and the
 *    quotas for all `count` forks (429 `quota_exceeded` and nothing made), the source's row held
 *    `FOR SHARE` and still running, then each fork's `pending` row, egress entry and `Create`
 *    (with `forkOf`) on the source's host, which must have room (otherwise each is `error` like
 *    an unplaceable create). A snapshot whose forks were never made is removed by its host.
 *
 * Each fork copies the source's row: template, resources, env (the host's copy of it), network
 * policy, secrets, exposed ports, type, region, `timeout_s`, metadata unless given; not its
 * volumes (a volume's files are not part of the file system copied). Its parent is the key's
 * sandbox for a `sandbox:<id>` key, else the source's parent.
 */
import * as Actors from "@svc/actors/Actors"
import { commit } from "@svc/actors/Commit"
import { sealEnv } from "@svc/crypto/SealedEnv"
import { SecretBox } from "@svc/crypto/SecretBox"
import { Idempotency, type Outcome } from "@svc/db/Idempotency"
import * as Rows from "@svc/db/Rows"
import type { ForkRequest, ForkResult } from "@svc/domain/Api/Forks"
import * as Errors from "@svc/domain/Errors"
import { BASE_TEMPLATE_ID, DEBIAN_TEMPLATE_ID, makeId, type OrgId } from "@svc/domain/Ids"
import { Sandbox } from "@svc/domain/Sandbox"
import * as Outbox from "@svc/events/Outbox"
import { wakeIfPresent } from "@svc/events/Relay"
import type { SandboxImage } from "@svc/host-protocol/Images"
import * as AgentClient from "@svc/hosts/AgentClient"
import { Hosts } from "@svc/hosts/Hosts"
import * as Scheduler from "@svc/hosts/Scheduler"
import { find as findTemplate } from "@svc/templates/Store"
import { Clock, Context, Effect, Layer, Option, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { createHash, randomBytes } from "node:crypto"
import { QuotasConfig } from "./Config.ts"
import { SandboxActor } from "./SandboxActor.ts"
import { egressMessage } from "./Sandboxes/Egress.ts"
import type { SandboxActorState } from "./Sandboxes/Model.ts"
import * as Quota from "./Sandboxes/Quota.ts"
import { toRecord } from "./Sandboxes/Record.ts"
import { COLUMNS, SandboxRow, store, toStored } from "./Sandboxes/Store.ts"
import { UsageGate } from "./Sandboxes/UsageGate.ts"

const encodeResult = Schema.encodeSync(Schema.Struct({ sandboxes: Schema.Array(Sandbox) }))
const sourceRows = Rows.decoder("Forks.fork", SandboxRow)

const conflict = (s: { readonly state: string }) =>
  new Errors.Conflict({ error: `This sandbox is ${s.state}; only a running sandbox can be forked` })

/** The layer name of one fork request's snapshot (64 hex, as layers are named; not a content digest). */
export const snapshotLayer = (sourceId: string, nonce: string) =>
  createHash("sha256").update(`fork:${sourceId}:${nonce}`).digest("hex")

/** The forks' names: `name`, or `name-1`, `name-2`... for several; each one's id without a name. */
export const forkName = (name: string | undefined, id: string, index: number, count: number) =>
  name === undefined ? id : count === 1 ? name : `${name}-${index + 1}`

export class Forks extends Context.Service<Forks, {
  readonly fork: (
    orgId: OrgId,
    sourceId: string,
    request: ForkRequest,
    options: { readonly confinedTo: string | null; readonly idempotencyKey?: string | undefined }
  ) => Effect.Effect<
    Outcome<ForkResult>,
    | Errors.NotFound
    | Errors.Conflict
    | Errors.QuotaExceeded
    | Errors.UsageLimitReached
    | Errors.IdempotencyKeyReused
    | Errors.Unavailable
    | Rows.QueryError
  >
}>()("@svc/sandboxes/Forks") {
  static readonly make = Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const hosts = yield* Hosts
    const dataPlane = yield* AgentClient.AgentClient
    const idempotency = yield* Idempotency
    const box = yield* SecretBox
    const quotas = yield* QuotasConfig
    const usage = yield* UsageGate

    const loadSource = (orgId: string, id: string, lock: boolean) =>
      Effect.gen(function*() {
        const rows = yield* sourceRows(
          lock
            ? sql`SELECT ${sql.literal(COLUMNS)} FROM sandboxes WHERE id = ${id} AND org_id = ${orgId} FOR SHARE`
            : sql`SELECT ${sql.literal(COLUMNS)} FROM sandboxes WHERE id = ${id} AND org_id = ${orgId}`
        )
        if (rows.length === 0) return yield* new Errors.NotFound({ error: "Sandbox not found" })
        return toStored(rows[0]!).state
      })

    /** The image the source's template gives its sandboxes (as `Templates.resolve`); 409 once deleted. */
    const imageOf = (orgId: string, templateId: string) =>
      Effect.gen(function*(): Effect.fn.Return<SandboxImage | undefined, Errors.Conflict | Rows.QueryError> {
        if (templateId === BASE_TEMPLATE_ID) return undefined
        if (templateId === DEBIAN_TEMPLATE_ID) return { layers: [], startCmd: null, readyCmd: null }
        const row = yield* findTemplate(sql, orgId, templateId)
        if (row === undefined || row.state !== "ready") {
          return yield* new Errors.Conflict({ error: "The sandbox's template no longer exists" })
        }
        return { layers: row.layers, startCmd: row.start_cmd, readyCmd: row.ready_cmd }
      })

    const fork = Effect.fn("Forks.fork")(function*(
      orgId: OrgId,
      sourceId: string,
      request: ForkRequest,
      options: { readonly confinedTo: string | null; readonly idempotencyKey?: string | undefined }
    ) {
      const seen = yield* loadSource(orgId, sourceId, false)
      if (seen.state !== "running" || seen.hostId === null) return yield* conflict(seen)
      const host = yield* hosts.get(seen.hostId)
      if (Option.isNone(host)) {
        return yield* new Errors.Unavailable({ error: "The sandbox's host is not known right now; retry" })
      }
      // Refused before a copy is made; counted again under the lock below.
      yield* Quota.count(orgId).pipe(
        Effect.flatMap((c) =>
          Quota.judge({ total: c.total + request.count - 1, running: c.running + request.count - 1 }, quotas, "create")
        )
      )
      const image = yield* imageOf(orgId, seen.templateId)
      const layer = snapshotLayer(sourceId, randomBytes(16).toString("hex"))
      yield* dataPlane.forkSnapshot(host.value, sourceId, layer).pipe(
        Effect.catchTag("NotFound", () => Effect.fail(conflict({ state: "gone from its host" })))
      )
      const now = yield* Clock.currentTimeMillis
      const insert = Effect.gen(function*(): Effect.fn.Return<
        ReadonlyArray<SandboxActorState>,
        Errors.NotFound | Errors.Conflict | Errors.QuotaExceeded | Errors.UsageLimitReached | Rows.QueryError,
        SqlClient.SqlClient
      > {
        yield* Quota.lockOrg(orgId)
        const counted = yield* Quota.count(
          orgId,
          sql`, ${Scheduler.placementLock(sql)} AS placement_lock ${usage.columns(sql, orgId, now)}`
        )
        yield* usage.decide(counted.row, now)
        yield* Quota.judge(
          { total: counted.total + request.count - 1, running: counted.running + request.count - 1 },
          quotas,
          "create"
        )
        const source = yield* loadSource(orgId, sourceId, true)
        if (source.state !== "running" || source.hostId !== seen.hostId) return yield* conflict(source)
        const live = yield* hosts.live
        const made: Array<SandboxActorState> = []
        for (let i = 0; i < request.count; i++) {
          const id = makeId("sandbox", now)
          // On the source's host, where its snapshot is; placed one after another in this
          // transaction, so each sees the ones before it.
          const placement = yield* Scheduler.place(
            live,
            {
              region: null,
              cpu: source.cpu,
              ramMb: source.ramMb,
              diskGb: source.diskGb,
              hostId: source.hostId
            },
            now,
            { locked: true }
          )
          const placed = placement._tag === "Placed" ? placement.host : null
          const state: SandboxActorState = {
            ...source,
            id,
            name: forkName(request.name, id, i, request.count),
            hostId: placed?.hostId ?? null,
            parentId: options.confinedTo ?? source.parentId,
            state: "pending",
            datacenter: placed?.datacenter ?? null,
            agentReady: false,
            runtimeReady: false,
            runtimeReason: null,
            vsockCid: null,
            internalIp: null,
            volumeAttachments: [],
            metadata: (request.metadata ?? source.metadata) as SandboxActorState["metadata"],
            errorMessage: null,
            createdAt: now,
            startedAt: null,
            stoppedAt: null,
            deletedAt: null,
            stateSince: now,
            lastReportAt: null,
            createdEmitted: false
          }
          const create = yield* Actors.outboxMessage(SandboxActor, id, {
            _tag: "Create",
            // The host gives a fork its source's env: nothing travels here.
            sealedEnv: yield* sealEnv(box, "transit", id, {}),
            ...(image !== undefined ? { image } : {}),
            unplaceable: placement._tag === "Unplaceable" ? placement.reason : null,
            forkOf: { sandboxId: source.id, snapshot: layer }
          }).pipe(Effect.catchTag("InvalidActorMessage", Effect.die))
          const messages = yield* Outbox.prepareAll([egressMessage(state), create]).pipe(
            Effect.catchTag("InvalidOutboxMessage", Effect.die)
          )
          const written = yield* commit(SandboxActor, store, {
            id,
            msgId: "api:create",
            state,
            expected: undefined,
            messages
          }).pipe(Effect.catchTag("CorruptState", (e) => Effect.die(e)))
          if (written !== "applied") return yield* Effect.die(new Error(`sandbox id ${id} taken`))
          made.push(state)
        }
        return made
      })
      const outcome = yield* idempotency.run({
        orgId,
        operation: `sandboxes.fork:${sourceId}`,
        key: options.idempotencyKey,
        request,
        create: insert,
        response: (states: ReadonlyArray<SandboxActorState>) =>
          encodeResult({ sandboxes: states.map((s) => toRecord(s)) })
      })
      if (outcome._tag === "Replayed") return outcome
      yield* wakeIfPresent
      return { _tag: "Created", value: { sandboxes: outcome.value.map((s) => toRecord(s)) } } satisfies Outcome<
        ForkResult
      >
    })

    const withSql = <A, E>(effect: Effect.Effect<A, E, SqlClient.SqlClient>) =>
      Effect.provideService(effect, SqlClient.SqlClient, sql)
    return Forks.of({
      fork: (orgId, sourceId, request, options) => withSql(fork(orgId, sourceId, request, options))
    })
  })

  /** Needs `SqlClient`, `Hosts`, `SecretBox`, `UsageGate` and the quotas' settings. */
  static readonly layer = Layer.effect(Forks, Forks.make).pipe(
    Layer.provide(Layer.mergeAll(Idempotency.layer, AgentClient.AgentClient.layer))
  )
}
