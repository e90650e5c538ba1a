/**
 * The per-process cache of verified API keys, and its coherence across API processes.
 *
 * - A verified key is cached by the SHA-256 of its token for `keyCacheTtl`; its expiry is
 *   checked on every use, so the cache never extends a key's life.
 * - Revoking a key drops it here and broadcasts `{kind: "key"}` on the core NATS subject
 *   `auth.cache`; every API process drops it and acknowledges. The revoking request waits until
 *   every live process (known from `auth.presence` heartbeats) has acknowledged, or until
 *   `revocationAckTimeout`; when acknowledgements are missing it broadcasts `{kind:
 *   "distrust"}` and every process that hears it checks Postgres on every request for one cache
 *   lifetime.
 * - A process that may have missed broadcasts distrusts itself: while disconnected from NATS
 *   (and after a slow-consumer drop) it empties the cache and bypasses it until reconnected.
 * - Org renames broadcast `{kind: "org"}` (not awaited): cached principals carry the org name.
 */
import { Nats } from "@svc/bus/Nats"
import type { Principal } from "@svc/domain/Api/Auth"
import { Clock, Context, Duration, Effect, Layer, Option, Schedule, Schema } from "effect"
import { randomBytes } from "node:crypto"
import { AuthConfig } from "../Config.ts"

export interface CachedKey {
  readonly principal: Principal
  readonly expiresAtMs: number | null
  readonly cachedAtMs: number
}

/** What a revocation broadcast achieved: which live processes confirmed. */
export interface Propagation {
  readonly expected: number
  readonly acknowledged: number
}

const MAX_ENTRIES = 50_000
const HEARTBEAT = Duration.seconds(2)
/** A process not heard from for this long is not waited for. */
const PRESENCE_TIMEOUT_MS = 3 * Duration.toMillis(HEARTBEAT)

const CacheMessage = Schema.Union([
  Schema.Struct({ kind: Schema.Literal("key"), from: Schema.String, keyId: Schema.String }),
  Schema.Struct({ kind: Schema.Literal("org"), from: Schema.String, orgId: Schema.String }),
  Schema.Struct({ kind: Schema.Literal("distrust"), from: Schema.String, forMs: Schema.Number })
])
type CacheMessage = typeof CacheMessage.Type
const PresenceMessage = Schema.Struct({
  process: Schema.String,
  state: Schema.Literals(["hello", "alive", "bye"])
})
type PresenceMessage = typeof PresenceMessage.Type

const decodeCache = Schema.decodeUnknownOption(Schema.fromJsonString(CacheMessage))
const decodePresence = Schema.decodeUnknownOption(Schema.fromJsonString(PresenceMessage))
const encoder = new TextEncoder()
const decoder = new TextDecoder()
const json = (value: CacheMessage | PresenceMessage | { readonly process: string }) =>
  encoder.encode(JSON.stringify(value))

export class CredentialCache extends Context.Service<CredentialCache, {
  /** This process's id on the bus. */
  readonly processId: string
  /** The entry for a token hash if it may be used now; synchronous (the hot path). */
  readonly get: (tokenHash: string, nowMs: number) => CachedKey | undefined
  /** A counter that moves on every drop: read it before a database lookup, pass it to `set`. */
  readonly epoch: () => number
  /**
   * Caches a lookup's result unless something was dropped since `epoch` was read (the lookup
   * may have raced a revocation, and caching it would resurrect the key).
   */
  readonly set: (tokenHash: string, entry: CachedKey, epoch: number) => void
  /** Drops a key here and on every API process; waits for their acknowledgements. */
  readonly revoked: (keyId: string) => Effect.Effect<Propagation>
  /** Drops the cached principals of an org everywhere (its name changed); not awaited. */
  readonly orgChanged: (orgId: string) => Effect.Effect<void>
  /** The other API processes heard from recently. */
  readonly liveProcesses: (nowMs: number) => ReadonlyArray<string>
}>()("@svc/auth/CredentialCache") {
  static readonly layer = Layer.effect(
    CredentialCache,
    Effect.gen(function*() {
      const nats = yield* Nats
      const config = yield* AuthConfig
      const nc = nats.connection
      const processId = `api_${randomBytes(8).toString("hex")}`
      const ttlMs = Duration.toMillis(config.keyCacheTtl)
      const ackTimeoutMs = Duration.toMillis(config.revocationAckTimeout)
      const cacheSubject = nats.subject("auth", "cache")
      const presenceSubject = nats.subject("auth", "presence")
      const clock = yield* Clock.Clock
      const now = () => clock.currentTimeMillisUnsafe()

      const entries = new Map<string, CachedKey>()
      const hashesByKey = new Map<string, string>()
      const peers = new Map<string, number>()
      let connected = !nc.isClosed()
      let distrustUntil = 0
      let epoch = 0
      let inboxes = 0

      const clear = () => {
        epoch++
        entries.clear()
        hashesByKey.clear()
      }
      const dropKey = (keyId: string) => {
        epoch++
        const hash = hashesByKey.get(keyId)
        if (hash !== undefined) entries.delete(hash)
        hashesByKey.delete(keyId)
      }
      const dropOrg = (orgId: string) => {
        epoch++
        for (const [hash, entry] of entries) {
          if (entry.principal.orgId === orgId) {
            entries.delete(hash)
            hashesByKey.delete(entry.principal.credential.id)
          }
        }
      }
      const trusted = (nowMs: number) => connected && nowMs >= distrustUntil

      const get = (tokenHash: string, nowMs: number): CachedKey | undefined => {
        const entry = entries.get(tokenHash)
        if (entry === undefined) return undefined
        if (!trusted(nowMs) || nowMs - entry.cachedAtMs >= ttlMs || nowMs < entry.cachedAtMs) {
          entries.delete(tokenHash)
          hashesByKey.delete(entry.principal.credential.id)
          return undefined
        }
        return entry
      }
      const set = (tokenHash: string, entry: CachedKey, startedAt: number) => {
        if (startedAt !== epoch || !trusted(entry.cachedAtMs)) return
        if (entries.size >= MAX_ENTRIES) {
          // Oldest insertion first: Maps iterate in insertion order.
          const oldest = entries.keys().next()
          if (!oldest.done) {
            const e = entries.get(oldest.value)
            entries.delete(oldest.value)
            if (e) hashesByKey.delete(e.principal.credential.id)
          }
        }
        entries.set(tokenHash, entry)
        hashesByKey.set(entry.principal.credential.id, tokenHash)
      }

      const liveProcesses = (nowMs: number) => {
        const live: Array<string> = []
        for (const [id, seen] of peers) {
          if (nowMs - seen < PRESENCE_TIMEOUT_MS) live.push(id)
          else peers.delete(id)
        }
        return live
      }

      // Broadcasts from every API process (this one included: ignored by `from`).
      const cacheSub = nc.subscribe(cacheSubject, {
        callback: (error, msg) => {
          if (error) return
          const decoded = decodeCache(decoder.decode(msg.data))
          if (Option.isNone(decoded)) return
          const m = decoded.value
          if (m.from === processId) return
          switch (m.kind) {
            case "key":
              dropKey(m.keyId)
              break
            case "org":
              dropOrg(m.orgId)
              break
            case "distrust":
              clear()
              distrustUntil = Math.max(distrustUntil, now() + Math.min(Math.max(0, m.forMs), 10 * ttlMs))
              break
          }
          if (msg.reply) msg.respond(json({ process: processId }))
        }
      })
      const presenceSub = nc.subscribe(presenceSubject, {
        callback: (error, msg) => {
          if (error) return
          const decoded = decodePresence(decoder.decode(msg.data))
          if (Option.isNone(decoded) || decoded.value.process === processId) return
          const m = decoded.value
          if (m.state === "bye") {
            peers.delete(m.process)
            return
          }
          peers.set(m.process, now())
          // A newcomer learns of us at once rather than at our next heartbeat.
          if (m.state === "hello") nc.publish(presenceSubject, json({ process: processId, state: "alive" }))
        }
      })
      yield* Effect.addFinalizer(() =>
        Effect.sync(() => {
          if (!nc.isClosed()) nc.publish(presenceSubject, json({ process: processId, state: "bye" }))
          cacheSub.unsubscribe()
          presenceSub.unsubscribe()
        })
      )

      // Missed broadcasts are only possible while disconnected or after a slow-consumer drop.
      yield* Effect.tryPromise(async () => {
        for await (const status of nc.status()) {
          switch (status.type) {
            case "disconnect":
            case "reconnecting":
            case "staleConnection":
              connected = false
              clear()
              break
            case "reconnect":
              clear()
              connected = true
              nc.publish(presenceSubject, json({ process: processId, state: "hello" }))
              break
            case "slowConsumer":
            case "close":
              clear()
              if (status.type === "close") connected = false
              break
          }
        }
      }).pipe(Effect.ignore, Effect.forkScoped)

      nc.publish(presenceSubject, json({ process: processId, state: "hello" }))
      yield* Effect.sync(() => {
        if (!nc.isClosed()) nc.publish(presenceSubject, json({ process: processId, state: "alive" }))
      }).pipe(Effect.repeat(Schedule.spaced(HEARTBEAT)), Effect.forkScoped)

      /** Publishes with a reply inbox; yields the processes of `expected` that acknowledged it. */
      const broadcastAndWait = (message: CacheMessage, expected: ReadonlyArray<string>) =>
        expected.length === 0
          ? Effect.sync((): ReadonlyArray<string> => {
            if (!nc.isClosed()) nc.publish(cacheSubject, json(message))
            return []
          })
          : Effect.callback<ReadonlyArray<string>>((resume) => {
            const waiting = new Set(expected)
            const inbox = `_INBOX.${processId}.${++inboxes}`
            let timer: ReturnType<typeof setTimeout> | undefined
            const finish = () => {
              if (timer) clearTimeout(timer)
              sub.unsubscribe()
              resume(Effect.succeed(expected.filter((p) => !waiting.has(p))))
            }
            const sub = nc.subscribe(inbox, {
              callback: (error, msg) => {
                if (error) return
                const from = Option.getOrUndefined(
                  Schema.decodeUnknownOption(Schema.fromJsonString(Schema.Struct({ process: Schema.String })))(
                    decoder.decode(msg.data)
                  )
                )
                if (from) waiting.delete(from.process)
                if (waiting.size === 0) finish()
              }
            })
            timer = setTimeout(finish, ackTimeoutMs)
            try {
              nc.publish(cacheSubject, json(message), { reply: inbox })
            } catch {
              finish()
            }
            return Effect.sync(() => {
              if (timer) clearTimeout(timer)
              sub.unsubscribe()
            })
          })

      const revoked = Effect.fn("CredentialCache.revoked")(function*(keyId: string) {
        dropKey(keyId)
        const expected = liveProcesses(now())
        if (expected.length === 0) {
          yield* Effect.sync(() => {
            if (!nc.isClosed()) nc.publish(cacheSubject, json({ kind: "key", from: processId, keyId }))
          })
          return { expected: 0, acknowledged: 0 }
        }
        const acknowledgedBy = yield* broadcastAndWait({ kind: "key", from: processId, keyId }, expected)
        if (acknowledgedBy.length < expected.length) {
          yield* Effect.logWarning("key revocation not acknowledged by every API process; caches distrusted", {
            expected: expected.length,
            acknowledged: acknowledgedBy.length
          })
          // The processes that answered are reachable: the revocation returns only once they
          // distrust their caches too (the silent one may have cached the key before it died).
          yield* broadcastAndWait({ kind: "distrust", from: processId, forMs: ttlMs }, acknowledgedBy)
        }
        return { expected: expected.length, acknowledged: acknowledgedBy.length }
      })

      const orgChanged = (orgId: string) =>
        Effect.sync(() => {
          dropOrg(orgId)
          if (!nc.isClosed()) nc.publish(cacheSubject, json({ kind: "org", from: processId, orgId }))
        })

      return CredentialCache.of({ processId, get, epoch: () => epoch, set, revoked, orgChanged, liveProcesses })
    })
  )

  /**
   * No cache and no bus: for operator commands that mint keys and create orgs from a process
   * that serves no requests (nothing cached to keep coherent).
   */
  static readonly layerNoCache = Layer.succeed(
    CredentialCache,
    CredentialCache.of({
      processId: "operator",
      get: () => undefined,
      epoch: () => 0,
      set: () => {},
      revoked: () => Effect.succeed({ expected: 0, acknowledged: 0 }),
      orgChanged: () => Effect.void,
      liveProcesses: () => []
    })
  )
}
