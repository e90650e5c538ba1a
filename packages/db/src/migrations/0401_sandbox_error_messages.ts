import { Effect } from "effect"
import { SqlClient } from "effect/sql"

/**
 * `errorMessage`s written before they were made tenant-safe (packages/sandboxes README, "The
 * control plane's limits"), rewritten the way they are written now:
 * - an unplaceable sandbox named the host that came closest and its free capacity:
 *   `... has room for cpu 1, ram_mb 512, disk_gb 1 (most free: host_x with cpu 0, ...)` loses the
 *   parenthesis;
 * - a failed host command carried the driver's message (host paths, bubblewrap's log tail):
 *   `host h could not start the sandbox: start failed: <details>` becomes
 *   `... start failed on the host`, and `host out of capacity: <details>` becomes
 *   `the host is out of capacity`.
 * Idempotent: a rewritten message matches none of the patterns.
 */
// Patterns as parameters: a tagged template cannot hold `\(` or `\S`.
const MOST_FREE = String.raw` \(most free: [^()]*\)$`
const DRIVER_DETAILS = String.raw`^(host \S+ could not \w+ the sandbox: )(\w+) failed: .*$`
const CAPACITY_DETAILS = String.raw`^(host \S+ could not \w+ the sandbox: )host out of capacity: .*$`

export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    UPDATE sandboxes SET error_message = regexp_replace(error_message, ${MOST_FREE}, '')
    WHERE error_message ~ ${MOST_FREE}`
  yield* sql`
    UPDATE sandboxes SET error_message = regexp_replace(error_message, ${DRIVER_DETAILS}, ${String
    .raw`\1\2 failed on the host`})
    WHERE error_message ~ ${DRIVER_DETAILS}`
  yield* sql`
    UPDATE sandboxes SET error_message = regexp_replace(error_message, ${CAPACITY_DETAILS}, ${String
    .raw`\1the host is out of capacity`})
    WHERE error_message ~ ${CAPACITY_DETAILS}`
})
