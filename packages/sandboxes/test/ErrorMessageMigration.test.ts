/**
 * Migration 0401 on a real Postgres: `errorMessage`s written before they were made tenant-safe
 * lose the other host's id and capacity, the driver's details and host paths; the messages of
 * today stay as they are, and running it again changes nothing.
 */
import { expect, layer } from "@effect/vitest"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { Effect } from "effect"
import { SqlClient } from "effect/sql"
import scrub from "../../db/src/migrations/0401_sandbox_error_messages.ts"

const BEFORE_AFTER: ReadonlyArray<readonly [string, string]> = [
  [
    "no live host in region eu has room for cpu 1, ram_mb 256, disk_gb 1 (most free: host_01abc with cpu 0, ram_mb 512, disk_gb 9)",
    "no live host in region eu has room for cpu 1, ram_mb 256, disk_gb 1"
  ],
  [
    "host host_01abc could not start the sandbox: start failed: bubblewrap exited (124) before the sandbox was ready: " +
    "mount: /tmp/svc/sandboxes/sbx_1/root: special device overlay does not exist.\n       dmesg(1) may have more information",
    "host host_01abc could not start the sandbox: start failed on the host"
  ],
  [
    "host host_01abc could not start the sandbox: host out of capacity: no free address in 10.213.0.0/16",
    "host host_01abc could not start the sandbox: the host is out of capacity"
  ],
  // Today's messages are left alone.
  ["no live host in region mars (live regions: local)", "no live host in region mars (live regions: local)"],
  [
    "host host_01abc could not stop the sandbox: stop failed on the host",
    "host host_01abc could not stop the sandbox: stop failed on the host"
  ],
  ["the sandbox did not start within 120 s", "the sandbox did not start within 120 s"]
]

layer(TestDatabase.layer)("migration 0401", (it) => {
  it.effect("rewrites the leaky errorMessages of earlier releases, idempotently", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql`INSERT INTO orgs (id, name) VALUES ('org_00000000000000000000000009', 'o')`
      for (const [i, [before]] of BEFORE_AFTER.entries()) {
        yield* sql`
          INSERT INTO sandboxes (id, org_id, name, template_id, template_name, state, type, region, cpu, ram_mb, disk_gb,
            exposed_ports, volume_attachments, metadata, error_message, created_at, state_since, created_emitted, version)
          VALUES (${`sbx_m${i}`}, 'org_00000000000000000000000009', 'n', 'tpl_00000000000000000000000000', 'base', 'error',
            'persistent', 'local', 1, 256, 1, '[]'::jsonb, '[]'::jsonb, '{}'::jsonb, ${before}, now(), now(), false, 1)`
      }
      const read = Effect.map(
        sql<
          { error_message: string }
        >`SELECT error_message FROM sandboxes WHERE org_id = 'org_00000000000000000000000009' ORDER BY id`,
        (rows) => rows.map((r) => r.error_message)
      )
      yield* scrub
      expect(yield* read).toEqual(BEFORE_AFTER.map(([, after]) => after))
      yield* scrub
      expect(yield* read).toEqual(BEFORE_AFTER.map(([, after]) => after))
    }))
})
