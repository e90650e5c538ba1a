/**
 * The sandbox actor's store on a real Postgres: every field survives the row, creation refuses
 * an existing id, and an update applies only on the expected version.
 */
import { expect, layer } from "@effect/vitest"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { Effect, Option } from "effect"
import { SqlClient } from "effect/sql"
import type { SandboxActorState } from "../src/Sandboxes/Model.ts"
import { store } from "../src/Sandboxes/Store.ts"

const state = (patch: Partial<SandboxActorState> = {}): SandboxActorState => ({
  id: "sbx_store_1",
  orgId: "org_00000000000000000000000002",
  name: "name with ünïcode",
  templateId: "tpl_00000000000000000000000000",
  templateName: "base",
  hostId: "host_1",
  parentId: null,
  state: "running",
  type: "ephemeral",
  region: "local",
  datacenter: "dc-1",
  agentReady: true,
  runtimeReady: false,
  runtimeReason: "not checked",
  cpu: 2,
  ramMb: 512,
  diskGb: 3,
  vsockCid: 7,
  internalIp: "10.0.0.2",
  exposedPorts: [80, 443],
  volumeAttachments: [{
    volume_id: "vol_00000000000000000000000001" as never,
    type: "local",
    driver: "local",
    mount_path: "/data",
    subpath: "",
    mode: "rw",
    attachment_id: "vat_00000000000000000000000001" as never,
    device_path: "/dev/loop7"
  }],
  metadata: { nested: { list: [1, "two", null, true] } },
  errorMessage: null,
  network: { allow_out: ["example.com", "*.example.org"], deny_out: ["10.0.0.0/8"] },
  secretIds: ["sec_b", "sec_a"],
  timeoutS: 3600,
  createdAt: Date.UTC(2026, 10, 22, 1, 2, 3, 456),
  startedAt: Date.UTC(2026, 10, 22, 1, 2, 4, 1),
  stoppedAt: null,
  deletedAt: null,
  stateSince: Date.UTC(2026, 10, 22, 1, 2, 4, 1),
  lastReportAt: 1_763_773_324_001,
  createdEmitted: true,
  idleTimeoutS: 300,
  onTimeout: "delete",
  autoDeleteS: 86_400,
  autoResume: true,
  timeoutFrom: Date.UTC(2026, 10, 22, 1, 2, 5, 7),
  lastActivityAt: Date.UTC(2026, 10, 22, 1, 2, 6, 9),
  busy: true,
  stopReason: "idle",
  ...patch
})

layer(TestDatabase.layer)("sandbox actor store", (it) => {
  it.effect("round trip, create-once and compare-and-set on the version", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* sql`INSERT INTO orgs (id, name) VALUES ('org_00000000000000000000000002', 'o')`
      expect(Option.isNone(yield* store.load("sbx_store_1"))).toBe(true)
      expect(yield* store.save("sbx_store_1", state(), undefined)).toBe(true)
      expect(yield* store.load("sbx_store_1")).toEqual(Option.some({ version: 1, state: state() }))
      // Creating again is refused.
      expect(yield* store.save("sbx_store_1", state({ name: "again" }), undefined)).toBe(false)

      const next = state({
        state: "stopped",
        agentReady: false,
        stoppedAt: Date.UTC(2026, 10, 22, 2),
        errorMessage: "x"
      })
      expect(yield* store.save("sbx_store_1", next, 2)).toBe(false)
      expect(yield* store.save("sbx_store_1", next, 1)).toBe(true)
      expect(yield* store.save("sbx_store_1", state(), 1)).toBe(false)
      expect(yield* store.load("sbx_store_1")).toEqual(Option.some({ version: 2, state: next }))

      // A row the schema refuses is corrupt state, not a crash.
      yield* sql`UPDATE sandboxes SET metadata = '[1]'::jsonb WHERE id = 'sbx_store_1'`
      const corrupt = yield* Effect.flip(store.load("sbx_store_1"))
      expect(corrupt._tag).toBe("CorruptState")
    }))
})
