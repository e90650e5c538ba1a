/**
 * Worker heartbeats (docs/contract.md#workers): every process of the runtime (api,
 * runtime, agent, dispatcher) puts its record in the `workers` KV bucket every
 * `WORKER_HEARTBEAT_MS`, and removes it when it stops. GET /v1/workers lists the records seen
 * in the last `WORKER_FRESH_MS`.
 *
 * The record: `name` (unique per process: `<role>-<hostname>-<pid>`), `script_name` (the role),
 * `version`, `prefix` (the NATS subject prefix the process consumes, under the deployment's
 * namespace; empty for the api, which consumes none), `cells` (null). The bucket's max age
 * drops records of processes that died without removing theirs.
 */
import { Clock, Context, Duration, Effect, Layer, Schedule, Schema } from "effect"
import * as Os from "node:os"
import { PlatformVersion } from "./Config.ts"
import { BusError, Nats } from "./Nats.ts"
import { ensureBucket } from "./Topology.ts"

export const WORKERS_BUCKET = "workers"
export const WORKER_HEARTBEAT_MS = 5_000
export const WORKER_FRESH_MS = 15_000
/** Records of dead processes vanish from the bucket after this long. */
export const WORKERS_BUCKET_TTL_MS = 60_000

export const WorkerRole = Schema.Literals(["api", "runtime", "agent", "dispatcher"])
export type WorkerRole = typeof WorkerRole.Type

/** What each role consumes, relative to the namespace (an agent adds its host id). */
export const DEFAULT_PREFIX: Record<WorkerRole, string> = {
  api: "",
  runtime: "actor.",
  agent: "agent.",
  dispatcher: "whd."
}

export const WorkerRecord = Schema.Struct({
  name: Schema.String,
  script_name: WorkerRole,
  version: Schema.String,
  prefix: Schema.String,
  cells: Schema.Null,
  /** ms since the epoch of the last heartbeat (not part of the API's shape). */
  seenAt: Schema.Number
})
export type WorkerRecord = typeof WorkerRecord.Type

const encoder = new TextEncoder()
const decoder = new TextDecoder()
const decodeRecord = Schema.decodeUnknownOption(Schema.fromJsonString(WorkerRecord))

const ensureWorkersBucket = ensureBucket({ name: WORKERS_BUCKET, history: 1, ttlMs: WORKERS_BUCKET_TTL_MS })

/** KV keys allow `[-/_=.A-Za-z0-9]`; a host name may hold anything. */
const keyOf = (name: string) => name.replace(/[^-_=A-Za-z0-9]/g, "_")

export interface HeartbeatOptions {
  /** Subject prefix consumed, relative to the namespace (default per role, see `DEFAULT_PREFIX`). */
  readonly prefix?: string
  /** Unique name of this process (default `<role>-<hostname>-<pid>`). */
  readonly name?: string
  readonly version?: string
  readonly intervalMs?: number
}

/** Heartbeats of this process into the `workers` bucket for the layer's lifetime. */
export class WorkerHeartbeat
  extends Context.Service<WorkerHeartbeat, { readonly record: Effect.Effect<WorkerRecord> }>()(
    "@svc/bus/WorkerHeartbeat"
  )
{
  static readonly make = Effect.fn("WorkerHeartbeat.make")(function*(role: WorkerRole, options: HeartbeatOptions = {}) {
    const nats = yield* Nats
    const kv = yield* ensureWorkersBucket
    const name = options.name ?? `${role}-${Os.hostname()}-${process.pid}`
    const key = keyOf(name)
    const version = options.version ?? (yield* PlatformVersion)
    const relative = options.prefix ?? DEFAULT_PREFIX[role]
    const prefix = relative === "" ? "" : nats.prefix === "" ? relative : `${nats.prefix}.${relative}`
    const record = Effect.map(Clock.currentTimeMillis, (seenAt): WorkerRecord => ({
      name,
      script_name: role,
      version,
      prefix,
      cells: null,
      seenAt
    }))
    const beat = Effect.flatMap(record, (r) =>
      Effect.tryPromise({
        try: () => kv.put(key, encoder.encode(JSON.stringify(r))),
        catch: (cause) => new BusError({ operation: "worker heartbeat", message: String(cause) })
      }))
    // The first beat before the layer is up, so a started process is listed at once.
    yield* Effect.ignore(beat)
    yield* Effect.forkScoped(
      beat.pipe(
        Effect.catchCause((cause) => Effect.logWarning("worker heartbeat failed", { cause: String(cause) })),
        Effect.repeat(Schedule.spaced(Duration.millis(options.intervalMs ?? WORKER_HEARTBEAT_MS)))
      )
    )
    yield* Effect.addFinalizer(() => Effect.ignore(Effect.tryPromise(() => kv.delete(key))))
    return WorkerHeartbeat.of({ record })
  })

  /** This process as a worker of `role`; needs `Nats`. */
  static readonly layer = (role: WorkerRole, options?: HeartbeatOptions) =>
    Layer.effect(WorkerHeartbeat, WorkerHeartbeat.make(role, options))
}

/** The workers seen within `WORKER_FRESH_MS` of now, by name. */
export const listWorkers = Effect.fn("Workers.list")(function*() {
  const kv = yield* ensureWorkersBucket
  const now = yield* Clock.currentTimeMillis
  const records = yield* Effect.tryPromise({
    try: async () => {
      const out: Array<WorkerRecord> = []
      for await (const key of await kv.keys()) {
        const entry = await kv.get(key)
        if (entry === null || entry.operation !== "PUT") continue
        const record = decodeRecord(decoder.decode(entry.value))
        if (record._tag === "Some") out.push(record.value)
      }
      return out
    },
    catch: (cause) => new BusError({ operation: "list workers", message: String(cause) })
  })
  return records
    .filter((r) => now - r.seenAt <= WORKER_FRESH_MS && r.seenAt <= now + WORKER_FRESH_MS)
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
})
