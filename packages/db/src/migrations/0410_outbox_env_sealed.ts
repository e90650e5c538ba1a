import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * A sandbox's env travels sealed since this version (packages/crypto/src/SealedEnv.ts). The
 * outbox rows written before it hold the env in the clear: the sandbox actor's `Create` messages
 * (`actor.sandbox.<partition>.<id>`) and the agents' `create` commands (`agent.<host>.create`).
 * Sent ones are only kept for pruning: deleted now rather than after 24 h. Unsent ones would be
 * refused by the new runtime and agents anyway (the env field changed): their sandboxes end in
 * `error` by the transition timeout.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    DELETE FROM outbox
    WHERE (subject LIKE 'actor.sandbox.%' AND payload::jsonb ->> '_tag' = 'Create' AND payload::jsonb ? 'env')
       OR (subject LIKE 'agent.%.create' AND payload::jsonb -> 'resources' ? 'env')`
})
