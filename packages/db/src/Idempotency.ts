/**
 * `Idempotency-Key` on the POSTs that create (docs/contract.md#conventions), for every feature: the
 * first request with a key makes the resource; the same key and body within 24 h answer the
 * first response again; another body with the key is 422 `idempotency_key_reused`.
 *
 * - Claim, create, record in ONE transaction: the key's row is inserted first, so a concurrent
 *   request with the same key waits on it (Postgres' unique index) until the first commits, then
 *   replays it (or is 422). A create that fails rolls the claim back: the key is free again, and
 *   only successful answers are replayed. So N racing requests make exactly one resource.
 * - Keys are scoped by org and by operation (`"sandboxes.create"`, ...): the same key in two
 *   orgs, or on two routes, is two entries.
 * - "The same body" is the SHA-256 of the canonical JSON of the request as the feature decoded
 *   it (keys sorted at every level), so key order and spelling of defaults do not matter.
 * - The stored entry (request hash and response) is sealed with SecretBox, bound to its
 *   (org, operation, key): a response may hold a secret shown once (`secret_returned_once`), and
 *   the hash of a body that holds a secret would let whoever reads the table test guesses.
 * - An entry older than 24 h is treated as absent (the next claim takes it over) and is pruned
 *   by a background loop of the layer (hourly) or `prune`.
 *
 * The create runs in the transaction of the SqlClient this service was built with: features
 * build it from the same client they query with (the process's one pool).
 */
import { SecretBox } from "@svc/crypto/SecretBox"
import { IdempotencyKeyReused } from "@svc/domain/Errors"
import { Context, Duration, Effect, Layer, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { createHash } from "node:crypto"
import * as Rows from "./Rows.ts"

export const IDEMPOTENCY_TTL_HOURS = 24
const PRUNE_EVERY = Duration.hours(1)

/** JSON with object keys sorted at every level: equal values, equal text. */
export const canonicalJson = (value: unknown): string =>
  JSON.stringify(value, (_key, v) =>
    v !== null && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, (v as Record<string, unknown>)[k]]))
      : v)

export const requestHash = (request: unknown): string =>
  createHash("sha256").update(canonicalJson(request)).digest("hex")

/** A create's answer: the new resource, or (same key, same body) the first answer's JSON. */
export type Outcome<A> =
  | { readonly _tag: "Created"; readonly value: A }
  | { readonly _tag: "Replayed"; readonly body: unknown }

export interface RunOptions<A, E, R> {
  readonly orgId: string
  /** What the key is scoped to besides the org, e.g. `"webhooks.create"`. */
  readonly operation: string
  /** The caller's `Idempotency-Key`; without one the create just runs (in a transaction). */
  readonly key: string | undefined
  /** The decoded request: its canonical hash tells "the same body". */
  readonly request: unknown
  /** Makes the resource; its statements join the transaction that holds the claim. */
  readonly create: Effect.Effect<A, E, R>
  /** The JSON body a replay answers (the encoded response of the first request). */
  readonly response: (value: A) => unknown
}

/** What a key's row holds, sealed: the first request's hash and its answer (JSON drops an undefined one). */
const Entry = Schema.Struct({ request_hash: Schema.String, response: Schema.optionalKey(Schema.Unknown) })
type Entry = typeof Entry.Type
const decodeEntry = Schema.decodeUnknownEffect(Schema.fromJsonString(Entry))

const entryRows = Rows.decoder("Idempotency.run", Schema.Struct({ entry: Schema.NullOr(Schema.String) }))
const prunedRows = Rows.decoder("Idempotency.prune", Schema.Struct({ n: Schema.Int }))

export class Idempotency extends Context.Service<Idempotency, {
  readonly run: <A, E, R>(
    options: RunOptions<A, E, R>
  ) => Effect.Effect<Outcome<A>, E | IdempotencyKeyReused | Rows.QueryError, R>
  /** Deletes the entries older than 24 h; answers how many. */
  readonly prune: Effect.Effect<number, Rows.QueryError>
}>()("@svc/db/Idempotency") {
  static readonly make = Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const box = yield* SecretBox

    const run = <A, E, R>(options: RunOptions<A, E, R>) =>
      sql.withTransaction(
        Effect.gen(function*(): Effect.fn.Return<Outcome<A>, E | IdempotencyKeyReused | Rows.QueryError, R> {
          const { orgId, operation, key } = options
          if (key === undefined) return { _tag: "Created", value: yield* options.create }
          const aad = JSON.stringify(["idempotency", orgId, operation, key])
          const hash = requestHash(options.request)
          // Takes the key, or an entry of it that has expired; waits for a concurrent claimer.
          const claimed = yield* sql`
          INSERT INTO idempotency_keys (org_id, operation, key) VALUES (${orgId}, ${operation}, ${key})
          ON CONFLICT (org_id, operation, key) DO UPDATE SET entry = NULL, created_at = now()
          WHERE idempotency_keys.created_at < now() - make_interval(hours => ${IDEMPOTENCY_TTL_HOURS}::int)
          RETURNING key`
          if (claimed.length === 0) {
            const [row] = yield* entryRows(sql`
            SELECT entry FROM idempotency_keys WHERE org_id = ${orgId} AND operation = ${operation} AND key = ${key}`)
            // Committed entries always hold one: the claim and the record share a transaction.
            if (row?.entry == null) {
              return yield* Effect.die(new Error(`idempotency entry of ${operation} without its record`))
            }
            const entry = yield* decodeEntry(yield* Effect.orDie(box.open(row.entry, aad))).pipe(
              Effect.mapError((e) =>
                new Rows.RowDecodeError({ query: "Idempotency.run", message: `entry: ${e.message}` })
              )
            )
            if (entry.request_hash !== hash) return yield* new IdempotencyKeyReused()
            return { _tag: "Replayed", body: entry.response }
          }
          const value = yield* options.create
          const sealed = yield* box.seal(
            JSON.stringify({ request_hash: hash, response: options.response(value) } satisfies Entry),
            aad
          )
          yield* sql`UPDATE idempotency_keys SET entry = ${sealed}
          WHERE org_id = ${orgId} AND operation = ${operation} AND key = ${key}`
          return { _tag: "Created", value }
        })
      )

    const prune = Effect.map(
      prunedRows(sql`
        WITH gone AS (
          DELETE FROM idempotency_keys WHERE created_at < now() - make_interval(hours => ${IDEMPOTENCY_TTL_HOURS}::int) RETURNING 1
        ) SELECT count(*)::int AS n FROM gone`),
      (rows) => rows[0]?.n ?? 0
    )

    yield* Effect.forkScoped(Effect.forever(prune.pipe(
      Effect.catchCause((cause) => Effect.logWarning("idempotency: pruning failed", { cause: String(cause) })),
      Effect.andThen(Effect.sleep(PRUNE_EVERY))
    )))

    return Idempotency.of({ run, prune })
  })

  /** Needs SqlClient and SecretBox; prunes expired entries hourly while it lives. */
  static readonly layer = Layer.effect(Idempotency)(Idempotency.make)
}
