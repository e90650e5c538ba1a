/**
 * The SQL form of the `sandbox:<id>` confinement rule (`Confinement.sqlCondition`, which the
 * lists of a confined key use) on a real Postgres selects exactly the sandboxes the predicate
 * (`Confinement.confines`, tested against its table in packages/domain/test) reaches, from each
 * sandbox of a small tree confined to in turn.
 */
import { expect, layer } from "@effect/vitest"
import * as Confinement from "@svc/domain/Confinement"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { Effect, Schema } from "effect"
import { SqlClient } from "effect/sql"

const ORG = "org_00000000000000000000000007"

/** [id, parent]: two roots, children, grandchildren; parents before their children. */
const TREE: ReadonlyArray<readonly [string, string | null]> = [
  ["sbx_root_a", null],
  ["sbx_root_b", null],
  ["sbx_child_a1", "sbx_root_a"],
  ["sbx_child_a2", "sbx_root_a"],
  ["sbx_child_b1", "sbx_root_b"],
  ["sbx_grand_a11", "sbx_child_a1"],
  ["sbx_grand_a12", "sbx_child_a1"]
]

const Ids = Schema.Struct({ id: Schema.String })

layer(TestDatabase.layer)("Confinement.sqlCondition", (it) => {
  it.effect("selects what the predicate reaches: the sandbox and its direct children", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql`INSERT INTO orgs (id, name) VALUES (${ORG}, 'o')`
      for (const [id, parent] of TREE) {
        yield* sql`
          INSERT INTO sandboxes (id, org_id, name, template_id, template_name, parent_id, state, type, region, cpu,
            ram_mb, disk_gb, created_at, state_since, version)
          VALUES (${id}, ${ORG}, ${id}, 't', 'base', ${parent}, 'stopped', 'persistent', 'local', 1, 64, 1, now(),
            now(), 1)`
      }
      for (const [confinedTo] of TREE) {
        const rows = yield* sql`SELECT id FROM sandboxes
          WHERE ${sql.and([sql`org_id = ${ORG}`, Confinement.sqlCondition(sql, confinedTo)])} ORDER BY id`
        const selected = rows.map((row) => Schema.decodeUnknownSync(Ids)(row).id)
        const reached = TREE.filter(([id, parentId]) => Confinement.confines(confinedTo, { id, parentId }))
          .map(([id]) => id).sort()
        expect([confinedTo, selected]).toEqual([confinedTo, reached])
        // Never empty, never the whole tree: the table exercises both sides of the rule.
        expect(selected.length).toBeGreaterThan(0)
        expect(selected.length).toBeLessThan(TREE.length)
      }
    }))
})
