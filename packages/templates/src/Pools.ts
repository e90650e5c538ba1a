/**
 * A template's warm pool as the hosts learn it (docs/architecture.md#warm-pools): the `pools` KV
 * entry (@svc/host-protocol/Pools) written through the outbox in the transaction that changes
 * the row, so that the hosts see the changes in commit order (every writer holds the row's lock).
 *
 * - Which host: one per template, `pool_host_id`, chosen when a pool is first wanted: the host
 *   that built the image when it is live (its layers are there), else the scheduler's pick; a
 *   pool whose host is down is moved to a live one by the settling loop within about a second
 *   of the host being seen down (`Settle.ts`), or at a PATCH.
 * - The entry is put only for a `ready` template with `pool_size` > 0 (a build that ends ready
 *   puts it then); size 0 and the template's delete delete it: the host drains the pool.
 */
import { sealEnv } from "@svc/crypto/SealedEnv"
import type { SecretBox } from "@svc/crypto/SecretBox"
import * as Outbox from "@svc/events/Outbox"
import { type PoolEntry, poolKey, POOLS_BUCKET } from "@svc/host-protocol/Pools"
import type { HostRecord } from "@svc/host-protocol/Protocol"
import * as Scheduler from "@svc/hosts/Scheduler"
import { Effect } from "effect"
import type { Row } from "./Store.ts"

/** The host to keep `row`'s pool: the one it has if live, else its build's host if live, else placement's. */
export const chooseHost = (row: Row, live: ReadonlyArray<HostRecord>) =>
  Effect.gen(function*() {
    const isLive = (id: string | null) => id !== null && live.some((h) => h.hostId === id)
    if (isLive(row.pool_host_id)) return row.pool_host_id
    if (isLive(row.host_id)) return row.host_id
    const placed = yield* Scheduler.place(
      live,
      { region: null, cpu: 1, ramMb: 512, diskGb: 1, image: { root: row.root, layers: row.layers } },
      Date.now()
    )
    return placed._tag === "Placed" ? placed.host.hostId : null
  })

/** The outbox message that tells the hosts about `row`'s pool (put, or deleted: drained). */
export const poolMessage = (box: SecretBox["Service"], row: Row, hostId: string | null) =>
  Effect.gen(function*() {
    if (row.state !== "ready" || row.pool_size === 0 || hostId === null) {
      return Outbox.kvDelete(POOLS_BUCKET, poolKey(row.id))
    }
    const entry: PoolEntry = {
      templateId: row.id,
      hostId,
      size: row.pool_size,
      root: row.root,
      layers: row.layers,
      sealedEnv: yield* sealEnv(box, "transit", row.id, row.env),
      startCmd: row.start_cmd,
      readyCmd: row.ready_cmd
    }
    return Outbox.kvPut(POOLS_BUCKET, poolKey(row.id), entry)
  })
