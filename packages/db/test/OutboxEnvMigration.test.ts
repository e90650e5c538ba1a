/**
 * Migration 0410 on a real Postgres: outbox rows written before the env was sealed (a sandbox
 * actor's `Create` message, an agent's `create` command, sent or not) are deleted; every other
 * row, the sealed ones of the new version included, stays.
 */
import { describe, expect, layer } from "@effect/vitest"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import forgetPlaintextEnv from "../src/migrations/0410_outbox_env_sealed.ts"

describe("migration 0410: no env in the clear left in the outbox", () => {
  layer(TestDatabase.layer, { excludeTestServices: true })((it) => {
    it.effect("deletes the rows that carry an env in the clear, keeps the rest", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const rows: ReadonlyArray<readonly [string, string, unknown, boolean]> = [
          [
            "obx_old_create_sent",
            "actor.sandbox.3.sbx_a",
            { _tag: "Create", env: { KEY: "old" }, unplaceable: null },
            true
          ],
          ["obx_old_create_unsent", "actor.sandbox.7.sbx_b", { _tag: "Create", env: {}, unplaceable: null }, false],
          ["obx_old_command", "agent.host_1.create", {
            _tag: "create",
            sandboxId: "sbx_a",
            orgId: "org_1",
            resources: { template: "base", env: { KEY: "old" }, cpu: 1, ramMb: 128, diskGb: 1, exposedPorts: [] }
          }, true],
          [
            "obx_new_create",
            "actor.sandbox.3.sbx_c",
            { _tag: "Create", sealedEnv: "v1.k.x", unplaceable: null },
            false
          ],
          ["obx_new_command", "agent.host_1.create", {
            _tag: "create",
            sandboxId: "sbx_c",
            orgId: "org_1",
            resources: { template: "base", sealedEnv: "v1.k.x", cpu: 1, ramMb: 128, diskGb: 1, exposedPorts: [] }
          }, false],
          ["obx_start", "agent.host_1.start", { _tag: "start", sandboxId: "sbx_a", orgId: "org_1" }, true],
          ["obx_event", "evt.org_1.sandbox.created", {
            event: "sandbox.created",
            org_id: "org_1",
            data: { env: "not a sandbox env" }
          }, true]
        ]
        for (const [id, subject, payload, sent] of rows) {
          yield* sql`INSERT INTO outbox (id, subject, payload, sent_at)
            VALUES (${id}, ${subject}, ${JSON.stringify(payload)}::json, ${sent ? new Date() : null})`
        }
        yield* forgetPlaintextEnv
        const left = yield* sql<{ id: string }>`SELECT id FROM outbox ORDER BY id`
        expect(left.map((r) => r.id)).toEqual(["obx_event", "obx_new_command", "obx_new_create", "obx_start"])
      }))
  })
})
