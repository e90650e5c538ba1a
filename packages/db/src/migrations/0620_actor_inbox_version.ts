import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * The actors' inbox doubles as each entity's transition log: `version` is the entity version the
 * message's transition stored (NULL when it stored nothing: a message to an entity that does not
 * exist). Written in the transition's transaction, like the row itself, so every version of an
 * entity has exactly one message that produced it; a version with none or with two is a
 * transition applied outside the runtime's dedupe or twice (the chaos run checks this). The
 * log lasts as long as the inbox keeps its rows (7 days, `inboxRetention`).
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`ALTER TABLE actor_inbox ADD COLUMN version bigint`
})
