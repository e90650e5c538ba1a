/**
 * Build settling: a build's end comes from its host's `builds` KV entry
 * (@svc/host-protocol/Images). `settle`, run about every second by each API process
 * (`Templates.layer`), applies it to the row once (the update is guarded by `state = 'building'`)
 * with `template.state_updated` in the same transaction; it also fails a build whose host is
 * down, and one past its deadline (`SVC_TEMPLATE_BUILD_TIMEOUT`); and it moves a warm pool whose
 * host is down (or that has none: no host was live when it was wanted) to a live one (`movePools`).
 * `log` reads a build's log: the row's once it ended, the host's entry while it runs.
 */
import { Nats } from "@svc/bus/Nats"
import { ensureBucket } from "@svc/bus/Topology"
import { SecretBox } from "@svc/crypto/SecretBox"
import * as Outbox from "@svc/events/Outbox"
import { wakeIfPresent } from "@svc/events/Relay"
import {
  type BuildImage,
  BUILDS_BUCKET_SPEC,
  BuildStatus,
  imageDigestInput,
  type ImageRootName
} from "@svc/host-protocol/Images"
import { Hosts } from "@svc/hosts/Hosts"
import { Duration, Effect, Option, Schema } from "effect"
import { SqlClient } from "effect/sql"
import { createHash } from "node:crypto"
import { TemplateBuildTimeout } from "./Config.ts"
import * as Pools from "./Pools.ts"
import { COLUMNS, type Row, rows, used } from "./Store.ts"

export const imageDigest = (root: ImageRootName, layers: ReadonlyArray<string>) =>
  `sha256:${createHash("sha256").update(imageDigestInput(root, layers)).digest("hex")}`

const decodeStatus = Schema.decodeUnknownOption(Schema.fromJsonString(BuildStatus))
const textDecoder = new TextDecoder()

/** The settling of builds; `ended` runs once for each build it ends (image collection is then due). */
export const make = (ended: () => void) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const hosts = yield* Hosts
    const nats = yield* Nats
    const timeout = yield* TemplateBuildTimeout
    const box = yield* SecretBox
    const builds = yield* ensureBucket(BUILDS_BUCKET_SPEC).pipe(Effect.orDie)

    const status = (id: string) =>
      Effect.tryPromise(() => builds.get(id)).pipe(
        Effect.orElseSucceed(() => null),
        Effect.map((entry) =>
          entry === null || entry.operation !== "PUT"
            ? Option.none()
            : decodeStatus(textDecoder.decode(entry.value))
        )
      )

    /** The build's log so far (the row's once it ended). */
    const log = (row: Row) =>
      row.build_log !== null
        ? Effect.succeed(row.build_log)
        : Effect.map(status(row.id), Option.match({ onNone: () => "", onSome: (s) => s.log }))

    /** Ends a build: the row and its event in one transaction, once. */
    const finish = (
      row: Row,
      end: {
        readonly state: "ready" | "failed"
        readonly layers: ReadonlyArray<string>
        readonly env: Readonly<Record<string, string>>
        readonly errorMessage: string | null
        readonly log: string
        readonly image?: BuildImage | undefined
      }
    ) =>
      sql.withTransaction(Effect.gen(function*() {
        const image = end.state === "ready" ? imageDigest(row.root, end.layers) : null
        const updated = yield* used(sql`UPDATE templates SET state = ${end.state}, image = ${image},
            layers = ${JSON.stringify(end.layers)}::jsonb, env = ${JSON.stringify(end.env)}::jsonb,
            error_message = ${end.errorMessage}, build_log = ${end.log}, built_at = now()
          WHERE id = ${row.id} AND state = 'building' RETURNING id`)
        if (updated.length === 0) return
        const pulled = end.image
        if (end.state === "ready" && pulled !== undefined) {
          // How the image runs; its Entrypoint + Cmd only where the template gave no start_cmd.
          yield* sql`UPDATE templates SET image_digest = ${pulled.digest}, workdir = ${pulled.workdir},
              run_as = ${pulled.user}, exposed_ports = ${JSON.stringify(pulled.exposedPorts)}::jsonb,
              start_cmd = COALESCE(start_cmd, ${pulled.startCmd})
            WHERE id = ${row.id}`
        }
        ended()
        // A pool asked for at create starts once the image exists (`Pools.ts`).
        if (end.state === "ready" && row.pool_size > 0) {
          const ready = { ...row, state: "ready" as const, layers: end.layers, env: end.env }
          const hostId = yield* Pools.chooseHost(ready, yield* hosts.live)
          yield* sql`UPDATE templates SET pool_host_id = ${hostId} WHERE id = ${row.id}`
          yield* Outbox.append(yield* Pools.poolMessage(box, ready, hostId)).pipe(
            Effect.catchTag("InvalidOutboxMessage", Effect.die)
          )
        }
        yield* Outbox.appendEvent({
          event: "template.state_updated",
          orgId: row.org_id,
          data: { template_id: row.id, state: end.state, image }
        }).pipe(Effect.catchTag("InvalidOutboxMessage", Effect.die))
      }))

    /**
     * A pool whose host is down, or that has none, is given a live host (`Pools.chooseHost`):
     * the `pools` entry names it, so the dead host's entries are no longer placement's (its record
     * is not live) nor anyone's once it comes back (an agent drains an entry naming another host),
     * and the new host makes the pool. Under the row's lock, as a PATCH: hosts see the changes in
     * commit order; a second API process doing the same finds the row moved and leaves it.
     */
    const movePools = Effect.gen(function*() {
      // A mirror that has not read the hosts bucket yet would call every host down.
      if (!(yield* hosts.synced)) return
      const live = yield* hosts.live
      const liveIds = live.map((h) => h.hostId)
      const stranded = yield* rows(sql`SELECT ${sql.literal(COLUMNS)} FROM templates
        WHERE pool_size > 0 AND state = 'ready' AND deleted_at IS NULL
          AND (pool_host_id IS NULL OR NOT (pool_host_id = ANY(${liveIds}::text[])))`)
      for (const row of stranded) {
        yield* sql.withTransaction(Effect.gen(function*() {
          const locked = (yield* rows(sql`SELECT ${sql.literal(COLUMNS)} FROM templates
            WHERE id = ${row.id} AND pool_size > 0 AND state = 'ready' AND deleted_at IS NULL FOR UPDATE`))[0]
          if (locked === undefined || (locked.pool_host_id !== null && liveIds.includes(locked.pool_host_id))) return
          const hostId = yield* Pools.chooseHost(locked, live)
          if (hostId === null) return
          yield* sql`UPDATE templates SET pool_host_id = ${hostId} WHERE id = ${locked.id}`
          yield* Outbox.append(yield* Pools.poolMessage(box, locked, hostId)).pipe(
            Effect.catchTag("InvalidOutboxMessage", Effect.die)
          )
          yield* Effect.logInfo("templates: a warm pool moved off a host that is down", {
            templateId: locked.id,
            from: locked.pool_host_id,
            to: hostId
          })
        }))
      }
      if (stranded.length > 0) yield* wakeIfPresent
    })

    const settle = Effect.gen(function*() {
      const building = yield* rows(sql`SELECT ${sql.literal(COLUMNS)} FROM templates WHERE state = 'building'`)
      for (const row of building) {
        const current = yield* status(row.id)
        if (Option.isSome(current) && current.value.state !== "building") {
          yield* finish(row, { ...current.value, state: current.value.state })
          continue
        }
        const log = Option.isSome(current) ? current.value.log : ""
        const base = { layers: row.layers, env: row.env, log }
        if (Date.now() > row.deadline_at.getTime()) {
          yield* finish(row, {
            ...base,
            state: "failed",
            errorMessage: `the build ran past its time limit (${Math.round(Duration.toSeconds(timeout))} s)`
          })
        } else if (row.host_id !== null && !(yield* hosts.isLive(row.host_id))) {
          yield* finish(row, { ...base, state: "failed", errorMessage: "the build's host went down" })
        }
      }
      if (building.length > 0) yield* wakeIfPresent
      yield* movePools
    }).pipe(
      Effect.provideService(Nats, nats),
      Effect.provideService(SqlClient.SqlClient, sql),
      Effect.withSpan("Templates.settle")
    )

    return { settle, log }
  })
