/**
 * The host's mirror of the `egress` KV bucket (@svc/host-protocol/Egress): each sandbox's policy
 * and bound secrets, and each secret's rules and sealed value. Kept in memory by a watch, so a
 * policy change, a binding or a rotation applies to the next connection or request; a value is
 * kept sealed here and opened only when a request needs it (`Injector`).
 */
import { BusError } from "@svc/bus/Nats"
import { ensureBucket } from "@svc/bus/Topology"
import {
  EGRESS_BUCKET_SPEC,
  EgressSecret,
  type EgressSecret as EgressSecretType,
  SandboxEgress,
  type SandboxEgress as SandboxEgressType
} from "@svc/host-protocol/Egress"
import { Context, Deferred, Duration, Effect, Layer, Option, Schedule, Schema } from "effect"

const decoder = new TextDecoder()
const decodeSandbox = Schema.decodeUnknownOption(Schema.fromJsonString(SandboxEgress))
const decodeSecret = Schema.decodeUnknownOption(Schema.fromJsonString(EgressSecret))

interface Known<A> {
  readonly revision: number
  readonly value: A | null
}

export class EgressStore extends Context.Service<EgressStore, {
  /** The sandbox's entry as the watch has it; undefined when there is none (yet). */
  readonly sandbox: (sandboxId: string) => SandboxEgressType | undefined
  /**
   * The sandbox's entry, read from the bucket itself when the watch has none: a sandbox that
   * connects at once after its create may be ahead of the watch. Undefined: there is no entry
   * (the proxy refuses; a miss is remembered for a second so that a flood of connections from an
   * unknown sandbox is not a flood of reads).
   */
  readonly lookup: (sandboxId: string) => Effect.Effect<SandboxEgressType | undefined>
  /** The bound secrets of a sandbox that exist, in binding order. */
  readonly secretsOf: (sandboxId: string) => ReadonlyArray<EgressSecretType>
}>()("@svc/egress/EgressStore") {
  static readonly make = Effect.gen(function*() {
    const kv = yield* ensureBucket(EGRESS_BUCKET_SPEC)
    const sandboxes = new Map<string, Known<SandboxEgressType>>()
    const secrets = new Map<string, Known<EgressSecretType>>()
    const ready = yield* Deferred.make<void>()

    const apply = (key: string, revision: number, operation: string, value: Uint8Array) => {
      const put = operation === "PUT"
      if (key.startsWith("sandbox.")) {
        const id = key.slice("sandbox.".length)
        if ((sandboxes.get(id)?.revision ?? 0) >= revision) return
        sandboxes.set(id, {
          revision,
          value: put ? Option.getOrNull(decodeSandbox(decoder.decode(value))) : null
        })
      } else if (key.startsWith("secret.")) {
        const id = key.slice("secret.".length)
        if ((secrets.get(id)?.revision ?? 0) >= revision) return
        secrets.set(id, { revision, value: put ? Option.getOrNull(decodeSecret(decoder.decode(value))) : null })
      }
    }

    const mirror = Effect.gen(function*() {
      // Updates from now on, then what is there already: revisions order the two.
      const updates = yield* Effect.acquireRelease(
        Effect.tryPromise({
          try: () => kv.watch({ include: "updates" }),
          catch: (cause) => new BusError({ operation: "watch egress", message: String(cause) })
        }),
        (w) => Effect.sync(() => w.stop())
      )
      yield* Effect.tryPromise({
        try: async () => {
          for await (const key of await kv.keys()) {
            const entry = await kv.get(key)
            if (entry !== null) apply(entry.key, entry.revision, entry.operation, entry.value)
          }
        },
        catch: (cause) => new BusError({ operation: "read egress", message: String(cause) })
      })
      yield* Deferred.succeed(ready, undefined)
      yield* Effect.tryPromise({
        try: async () => {
          for await (const e of updates) apply(e.key, e.revision, e.operation, e.value)
        },
        catch: (cause) => new BusError({ operation: "watch egress", message: String(cause) })
      })
      return yield* new BusError({ operation: "watch egress", message: "watch ended" })
    }).pipe(
      Effect.scoped,
      Effect.tapError((e) => Effect.logWarning("egress: watch lost, restarting", { error: e.message })),
      Effect.retry(Schedule.min([Schedule.exponential(Duration.millis(100)), Schedule.spaced(Duration.seconds(5))]))
    )
    yield* Effect.forkScoped(mirror)
    yield* Effect.timeoutOption(Deferred.await(ready), Duration.seconds(5))

    const misses = new Map<string, number>()
    const lookup = (sandboxId: string): Effect.Effect<SandboxEgressType | undefined> => {
      const known = sandboxes.get(sandboxId)
      if (known !== undefined) return Effect.succeed(known.value ?? undefined)
      if ((misses.get(sandboxId) ?? 0) > Date.now()) return Effect.succeed(undefined)
      return Effect.tryPromise(() => kv.get(`sandbox.${sandboxId}`)).pipe(
        Effect.timeout(Duration.seconds(2)),
        Effect.map((entry) => {
          if (entry !== null) apply(entry.key, entry.revision, entry.operation, entry.value)
          const value = sandboxes.get(sandboxId)?.value ?? undefined
          if (value === undefined) {
            if (misses.size > 10_000) misses.clear()
            misses.set(sandboxId, Date.now() + 1_000)
          }
          return value
        }),
        Effect.orElseSucceed(() => undefined)
      )
    }

    return EgressStore.of({
      sandbox: (sandboxId) => sandboxes.get(sandboxId)?.value ?? undefined,
      lookup,
      secretsOf: (sandboxId) => {
        const entry = sandboxes.get(sandboxId)?.value
        if (entry === undefined || entry === null) return []
        return entry.secretIds.flatMap((id) => {
          const secret = secrets.get(id)?.value
          // A secret of another org is never written, whatever an entry says.
          return secret !== undefined && secret !== null && secret.orgId === entry.orgId ? [secret] : []
        })
      }
    })
  })

  /** Needs `Nats`; the watch runs for the layer's lifetime. */
  static readonly layer = Layer.effect(EgressStore, EgressStore.make)
}
