/**
 * Which of the given ids are live secrets of the org (the `secrets` table, packages/secrets),
 * for bindings. Run inside the binding's transaction, after the sandbox's row lock: the rows are
 * held `FOR SHARE` to the commit, so a concurrent deletion of one of them (which locks the
 * sandboxes that have it first, then the secret) waits and then removes the new binding too.
 */
import * as Rows from "@svc/db/Rows"
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"

const live = Rows.decoder("Sandboxes.secretRefs", Schema.Struct({ id: Schema.String }))

export const liveSecrets = (orgId: string, ids: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    if (ids.length === 0) return new Set<string>()
    const sql = yield* SqlClient.SqlClient
    const rows = yield* live(sql`
      SELECT id FROM secrets WHERE org_id = ${orgId} AND id = ANY(${[...ids]}::text[]) AND deleted_at IS NULL
      ORDER BY id FOR SHARE`)
    return new Set(rows.map((r) => r.id))
  })
