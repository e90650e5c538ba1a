/**
 * Sandboxes through the public API, against a real Postgres, NATS, the runtime role (sandbox
 * actor, outbox relay, supervisor) and a real host agent running bubblewrap sandboxes; the
 * events read back from the EVENTS stream. Placement and lost hosts: SandboxesHosts.test.ts.
 */
import { expect, layer } from "@effect/vitest"
import { BASE_TEMPLATE_ID, makeSandboxId } from "@svc/domain/Ids"
import { Duration, Effect } from "effect"
import { type Answer, call, eventually, Identity } from "../../testing/Sandboxes.ts"
import { api, create, Env, EnvLayer, eventsOf, expectError, get, waitState } from "../../testing/SandboxesEnv.ts"

const RECORD_KEYS = [
  "agent_ready",
  "cpu",
  "createdAt",
  "datacenter",
  "deletedAt",
  "diskGb",
  "errorMessage",
  "exposedPorts",
  "hostId",
  "id",
  "internalIp",
  "metadata",
  "name",
  "network",
  "orgId",
  "parentId",
  "ramMb",
  "region",
  "runtime_ready",
  "runtime_reason",
  "secrets",
  "startedAt",
  "state",
  "stoppedAt",
  "templateId",
  "type",
  "volume_attachments",
  "vsockCid",
  // Lifecycle (docs/contract.md#lifecycle-timeouts-idleness-resume).
  "timeout_s",
  "idle_timeout_s",
  "on_timeout",
  "auto_delete_s",
  "auto_resume",
  "expiresAt",
  "lastActivityAt",
  "stop_reason"
].sort()
const ISO_MS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/

layer(EnvLayer, { excludeTestServices: true, timeout: 180_000 })("sandboxes API", (it) => {
  it.effect("a sandbox's whole life: create, run, exec, files, stop, start, delete; each event once, field by field", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const created = yield* create({
        name: "life",
        region: "local",
        env: { GREETING: "hello from env" },
        cpu: 1,
        ram_mb: 128,
        metadata: { team: "a", n: 1 },
        exposed_ports: [8080]
      })
      expect(Object.keys(created).sort()).toEqual(RECORD_KEYS)
      expect(created).toMatchObject({
        name: "life",
        orgId: env.org.id,
        templateId: BASE_TEMPLATE_ID,
        hostId: env.hostId,
        parentId: null,
        state: "pending",
        type: "persistent",
        region: "local",
        datacenter: "local-1",
        agent_ready: false,
        runtime_ready: false,
        runtime_reason: null,
        cpu: 1,
        ramMb: 128,
        diskGb: 1,
        vsockCid: null,
        internalIp: null,
        exposedPorts: [8080],
        volume_attachments: [],
        metadata: { team: "a", n: 1 },
        errorMessage: null,
        startedAt: null,
        stoppedAt: null,
        deletedAt: null
      })
      expect(created.id).toMatch(/^sbx_[0-9a-z]{26}$/)
      expect(created.createdAt).toMatch(ISO_MS)
      expect(created).not.toHaveProperty("env")

      const running = yield* waitState(created.id, "running")
      expect(running.agent_ready).toBe(true)
      expect(running.internalIp).toMatch(/^\d+\.\d+\.\d+\.\d+$/)
      expect(running.startedAt).toMatch(ISO_MS)
      const ip = running.internalIp as string

      // exec: argv, the create-time env, exit code, both outputs.
      const exec = yield* api("POST", `/v1/sandboxes/${created.id}/exec`, {
        body: { cmd: ["sh", "-c", "echo \"$GREETING\"; echo oops >&2; exit 3"] }
      })
      expect(exec.status, exec.text).toBe(200)
      expect(exec.json).toMatchObject({ exit_code: 3, stdout: "hello from env\n", stderr: "oops\n" })
      expect(Number.isInteger(exec.json.duration_ms)).toBe(true)
      const stdin = yield* api("POST", `/v1/sandboxes/${created.id}/exec`, {
        body: { cmd: ["cat"], stdin: "piped", cwd: "/tmp", env: { X: "1" } }
      })
      expect(stdin.json).toMatchObject({ exit_code: 0, stdout: "piped" })

      // files: an upload above the API's 1 MiB body limit, read back byte for byte, and a folder.
      const big = new Uint8Array(2 * 1024 * 1024 + 17).map((_, i) => (i * 7) % 251)
      const put = yield* api("PUT", `/v1/sandboxes/${created.id}/files?path=/root/data.bin`, {
        raw: big,
        headers: { "content-type": "application/octet-stream" }
      })
      expect(put.status, put.text).toBe(204)
      const back = yield* api("GET", `/v1/sandboxes/${created.id}/files?path=/root/data.bin`)
      expect(back.status).toBe(200)
      expect(back.headers.get("content-type")).toContain("application/octet-stream")
      expect(Buffer.compare(Buffer.from(back.bytes), Buffer.from(big))).toBe(0)
      const folder = yield* api("GET", `/v1/sandboxes/${created.id}/files?path=/root`)
      expect(folder.status).toBe(200)
      expect(folder.json.entries).toContainEqual({
        name: "data.bin",
        type: "file",
        size: big.length,
        mtime: expect.stringMatching(/^\d{4}-/)
      })
      const missing = yield* api("GET", `/v1/sandboxes/${created.id}/files?path=/root/nope`)
      expectError(missing, 404, "not_found")
      for (const bad of ["", "?path=", "?path=relative", "?path=/root/../etc/passwd"]) {
        expectError(yield* api("GET", `/v1/sandboxes/${created.id}/files${bad}`), 400, "invalid_request")
      }

      // Refusals of the state machine: 409 with the record unchanged.
      expectError(yield* api("POST", `/v1/sandboxes/${created.id}/start`), 409, "conflict")

      const stopping = yield* api("POST", `/v1/sandboxes/${created.id}/stop`)
      expect(stopping.status).toBe(202)
      expect(stopping.json.state).toBe("stopping")
      const stopped = yield* waitState(created.id, "stopped")
      expect(stopped.agent_ready).toBe(false)
      expect(stopped.stoppedAt).toMatch(ISO_MS)
      expectError(yield* api("POST", `/v1/sandboxes/${created.id}/stop`), 409, "conflict")
      expectError(yield* api("POST", `/v1/sandboxes/${created.id}/exec`, { body: { cmd: ["true"] } }), 409, "conflict")
      expectError(yield* api("GET", `/v1/sandboxes/${created.id}/files?path=/root`), 409, "conflict")

      const starting = yield* api("POST", `/v1/sandboxes/${created.id}/start`)
      expect(starting.status).toBe(202)
      expect(starting.json.state).toBe("starting")
      const again = yield* waitState(created.id, "running")
      expect(again.internalIp).toBe(ip)
      // Persistent: the file system survived the stop.
      const kept = yield* api("GET", `/v1/sandboxes/${created.id}/files?path=/root/data.bin`)
      expect(kept.bytes.length).toBe(big.length)

      const deleting = yield* api("DELETE", `/v1/sandboxes/${created.id}`)
      expect(deleting.status).toBe(202)
      expect(deleting.json.state).toBe("deleting")
      const deleted = yield* waitState(created.id, "deleted")
      expect(deleted.deletedAt).toMatch(ISO_MS)
      expect(deleted.agent_ready).toBe(false)
      // Deleting again: the same record, nothing else happens.
      const twice = yield* api("DELETE", `/v1/sandboxes/${created.id}`)
      expect(twice.status).toBe(202)
      expect(twice.json.state).toBe("deleted")

      const { events, labels } = yield* eventsOf(created.id, "sandbox.deleted")
      expect(labels).toEqual([
        "sandbox.state_updated:starting",
        "sandbox.created",
        "sandbox.state_updated:running",
        "sandbox.state_updated:stopping",
        "sandbox.state_updated:stopped",
        "sandbox.state_updated:starting",
        "sandbox.state_updated:running",
        "sandbox.state_updated:deleting",
        "sandbox.state_updated:deleted",
        "sandbox.deleted"
      ])
      for (const e of events) {
        expect(Object.keys(e).sort()).toEqual(["data", "event", "org_id", "subject", "ts"])
        expect(e.subject).toBe(`${env.prefix}.evt.${env.org.id}.${e.event}`)
        expect(e.org_id).toBe(env.org.id)
        expect(e.ts).toMatch(ISO_MS)
      }
      expect(events[1]!.data).toEqual({
        sandbox_id: created.id,
        host_id: env.hostId,
        template: BASE_TEMPLATE_ID,
        cpu: 1,
        ram_mb: 128,
        disk_gb: 1,
        via: "cold-boot"
      })
      expect(events[0]!.data).toEqual({ sandbox_id: created.id, state: "starting", internal_ip: null, reason: null })
      expect(events[2]!.data).toEqual({ sandbox_id: created.id, state: "running", internal_ip: ip, reason: null })
      // Why it stopped, until it runs again.
      expect(events.slice(3, 6).map((e) => e.data.reason)).toEqual(["user", "user", "user"])
      expect(events[6]!.data).toEqual({ sandbox_id: created.id, state: "running", internal_ip: ip, reason: null })
      expect(events[9]!.data).toEqual({ sandbox_id: created.id, host_id: env.hostId })
      const times = events.map((e) => Date.parse(e.ts))
      expect([...times].sort((a, b) => a - b)).toEqual(times)
    }))

  it.effect("timeout_s stops a running sandbox; an ephemeral one is deleted once it stops", () =>
    Effect.gen(function*() {
      const persistent = yield* create({ region: "local", ram_mb: 64, timeout_s: 1 })
      const ephemeral = yield* create({ region: "local", ram_mb: 64, timeout_s: 1, type: "ephemeral" })
      expect(ephemeral.type).toBe("ephemeral")
      const stopped = yield* waitState(persistent.id, "stopped")
      expect(stopped.errorMessage).toBe(null)
      yield* waitState(ephemeral.id, "deleted")
      const { labels } = yield* eventsOf(ephemeral.id, "sandbox.deleted")
      expect(labels).toEqual([
        "sandbox.state_updated:starting",
        "sandbox.created",
        "sandbox.state_updated:running",
        "sandbox.state_updated:stopping",
        "sandbox.state_updated:stopped",
        "sandbox.state_updated:deleting",
        "sandbox.state_updated:deleted",
        "sandbox.deleted"
      ])
      // Started again, it runs for another timeout_s.
      yield* api("POST", `/v1/sandboxes/${persistent.id}/start`)
      yield* waitState(persistent.id, "running")
      yield* waitState(persistent.id, "stopped")
      yield* api("DELETE", `/v1/sandboxes/${persistent.id}`)
    }))

  it.effect("every create field is validated: each refusal is 400 naming the field", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<readonly [Record<string, unknown>, string]> = [
        [{ name: "" }, "name"],
        [{ name: "x".repeat(121) }, "name"],
        [{ name: "tab\there" }, "name"],
        [{ name: 5 }, "name"],
        [{ template: "" }, "template"],
        [{ template: "ubuntu" }, "template"],
        [{ parent_id: "sbx_nope" }, "parent_id"],
        [{ parent_id: makeSandboxId() }, "parent_id"],
        [{ env: { "1BAD": "x" } }, "env.1BAD"],
        [{ env: { A: "nul\u0000" } }, "env.A"],
        [{ env: Object.fromEntries(Array.from({ length: 129 }, (_, i) => [`V${i}`, "x"])) }, "env"],
        [{ env: { A: 1 } }, "env.A"],
        [{ cpu: 0 }, "cpu"],
        [{ cpu: 17 }, "cpu"],
        [{ cpu: 1.5 }, "cpu"],
        [{ cpu: "1" }, "cpu"],
        [{ ram_mb: 63 }, "ram_mb"],
        [{ ram_mb: 65_537 }, "ram_mb"],
        [{ disk_gb: 0 }, "disk_gb"],
        [{ disk_gb: 1025 }, "disk_gb"],
        [{ metadata: { big: "x".repeat(16 * 1024) } }, "metadata"],
        [{ metadata: [] }, "metadata"],
        [{ type: "forever" }, "type"],
        [{ region: "eu west" }, "region"],
        [{ region: "" }, "region"],
        [{ volumes: [{ volume_id: "vol_x", mount_path: "/data" }] }, "volumes.0.volume_id"],
        [
          { volumes: [{ volume_id: "vol_00000000000000000000000000", mount_path: "relative" }] },
          "volumes.0.mount_path"
        ],
        [{ volumes: [{ volume_id: "vol_00000000000000000000000000", mount_path: "/data" }] }, "volumes.0.volume_id"],
        [{ exposed_ports: [0] }, "exposed_ports.0"],
        [{ exposed_ports: [70_000] }, "exposed_ports.0"],
        [{ exposed_ports: [80, 80] }, "exposed_ports.1"],
        [{ exposed_ports: Array.from({ length: 17 }, (_, i) => 1000 + i) }, "exposed_ports"],
        [{ secrets: ["sec_x"] }, "secrets.0"],
        [{ secrets: ["sec_00000000000000000000000000"] }, "secrets.0"],
        [{ timeout_s: 0 }, "timeout_s"],
        [{ timeout_s: 30 * 24 * 3600 + 1 }, "timeout_s"]
      ]
      for (const [body, path] of cases) {
        const res = yield* api("POST", "/v1/sandboxes", { body })
        expectError(res, 400, "invalid_request")
        expect(res.json.issues.map((i: { path: string }) => i.path), `${JSON.stringify(body).slice(0, 80)}`).toContain(
          path
        )
      }
      // Several bad fields: every one named at once.
      const several = yield* api("POST", "/v1/sandboxes", { body: { cpu: 0, ram_mb: 1, type: "x" } })
      expect(several.json.issues.map((i: { path: string }) => i.path).sort()).toEqual(["cpu", "ram_mb", "type"])
      for (const raw of ["{", "[]", "null", "\"text\""]) {
        expectError(
          yield* api("POST", "/v1/sandboxes", { raw, headers: { "content-type": "application/json" } }),
          400,
          "invalid_request"
        )
      }
      // None of these created anything.
      const list = yield* api("GET", "/v1/sandboxes?paginated=false")
      expect(list.json.rows.filter((r: { name: string }) => r.name === "tab\there")).toEqual([])
    }))

  it.effect("Idempotency-Key: the same key and body replay the first answer (200), another body is 422", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const key = `idem-${Date.now()}`
      const body = { region: "nowhere", name: "idem", metadata: { a: 1 } }
      const first = yield* api("POST", "/v1/sandboxes", { body, headers: { "idempotency-key": key } })
      expect(first.status).toBe(201)
      const again = yield* api("POST", "/v1/sandboxes", {
        // The same body with its keys in another order.
        body: { metadata: { a: 1 }, name: "idem", region: "nowhere" },
        headers: { "idempotency-key": key }
      })
      expect(again.status).toBe(200)
      expect(again.json).toEqual(first.json)
      expectError(
        yield* api("POST", "/v1/sandboxes", { body: { ...body, name: "other" }, headers: { "idempotency-key": key } }),
        422,
        "idempotency_key_reused"
      )
      for (const bad of ["short", "x".repeat(256)]) {
        expectError(
          yield* api("POST", "/v1/sandboxes", { body, headers: { "idempotency-key": bad } }),
          400,
          "invalid_request"
        )
      }
      // Keys are per org.
      const theirs = yield* call(env.base, "POST", "/v1/sandboxes", {
        token: env.other.token,
        body,
        headers: { "idempotency-key": key }
      })
      expect(theirs.status).toBe(201)
      expect(theirs.json.id).not.toBe(first.json.id)
      // Racing requests with one key: one sandbox.
      const raced = `race-${Date.now()}`
      const answers = yield* Effect.forEach(
        [1, 2, 3, 4, 5],
        () =>
          api("POST", "/v1/sandboxes", {
            body: { region: "nowhere", name: raced },
            headers: { "idempotency-key": raced }
          }),
        { concurrency: 5 }
      )
      expect(answers.map((a) => a.status).sort()).toEqual([200, 200, 200, 200, 201])
      expect(new Set(answers.map((a) => a.json.id)).size).toBe(1)
      const listed = yield* api("GET", "/v1/sandboxes?paginated=false")
      expect(listed.json.rows.filter((r: { name: string }) => r.name === raced).length).toBe(1)
    }))

  it.effect("children: a child names its parent; deleting the parent deletes every descendant", () =>
    Effect.gen(function*() {
      const parent = yield* create({ region: "local", ram_mb: 64 })
      const child = yield* create({ region: "local", ram_mb: 64, parent_id: parent.id })
      expect(child.parentId).toBe(parent.id)
      const grandchild = yield* create({ region: "nowhere", parent_id: child.id })
      yield* waitState(parent.id, "running")
      yield* waitState(child.id, "running")
      yield* waitState(grandchild.id, "error")
      const res = yield* api("DELETE", `/v1/sandboxes/${parent.id}`)
      expect(res.json.state).toBe("deleting")
      for (const s of [parent, child, grandchild]) yield* waitState(s.id, "deleted")
      // A parent being deleted takes no new children.
      const late = yield* api("POST", "/v1/sandboxes", { body: { parent_id: parent.id } })
      expectError(late, 409, "conflict")
    }))

  it.effect("a sandbox:<id> key: its sandbox and direct children only; creating makes a child; the list is filtered", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const identity = yield* Identity
      const p = yield* create({ region: "nowhere", name: "p" })
      const c = yield* create({ region: "nowhere", name: "c", parent_id: p.id })
      const g = yield* create({ region: "nowhere", name: "g", parent_id: c.id })
      const o = yield* create({ region: "nowhere", name: "o" })
      const key = yield* identity.key(env.org.id, [`sandbox:${p.id}`])

      expect((yield* get(p.id, key)).status).toBe(200)
      expect((yield* get(c.id, key)).status).toBe(200)
      expectError(yield* get(g.id, key), 403, "sandbox_out_of_scope")
      expectError(yield* get(o.id, key), 403, "sandbox_out_of_scope")
      expectError(yield* get(makeSandboxId(), key), 404, "not_found")
      for (
        const [method, path] of [
          ["DELETE", `/v1/sandboxes/${g.id}`],
          ["POST", `/v1/sandboxes/${g.id}/stop`],
          ["POST", `/v1/sandboxes/${g.id}/start`],
          ["POST", `/v1/sandboxes/${g.id}/exec`],
          ["GET", `/v1/sandboxes/${g.id}/files?path=/`],
          ["PUT", `/v1/sandboxes/${g.id}/files?path=/x`]
        ] as const
      ) {
        const body = path.endsWith("/exec") ? { body: { cmd: ["true"] } } : {}
        expectError(yield* api(method, path, { token: key, ...body }), 403, "sandbox_out_of_scope")
      }
      // In scope, the state machine decides (409), not the policy.
      expectError(yield* api("POST", `/v1/sandboxes/${c.id}/stop`, { token: key }), 409, "conflict")

      const listed = yield* api("GET", "/v1/sandboxes?paginated=false", { token: key })
      expect(listed.json.rows.map((r: { id: string }) => r.id)).toEqual([c.id, p.id])
      expect(listed.json.total).toBe(2)

      const made = yield* create({ region: "nowhere" }, key)
      expect(made.parentId).toBe(p.id)
      const named = yield* create({ region: "nowhere", parent_id: p.id }, key)
      expect(named.parentId).toBe(p.id)
      expectError(
        yield* api("POST", "/v1/sandboxes", { token: key, body: { parent_id: c.id } }),
        403,
        "sandbox_out_of_scope"
      )
      expectError(
        yield* api("POST", "/v1/sandboxes", { token: key, body: { parent_id: o.id } }),
        403,
        "sandbox_out_of_scope"
      )
      const after = yield* api("GET", "/v1/sandboxes?paginated=false", { token: key })
      expect(after.json.rows.map((r: { id: string }) => r.id)).toEqual([named.id, made.id, c.id, p.id])

      // A read-only key lists and reads but does not write.
      const reader = yield* identity.key(env.org.id, ["sandboxes:read"])
      expect((yield* get(o.id, reader)).status).toBe(200)
      const refused = yield* api("POST", "/v1/sandboxes", { token: reader, body: {} })
      expectError(refused, 403, "insufficient_scope")
      expect(refused.json.required_scope).toBe("sandboxes:write")
    }))

  it.effect("another org's sandbox is 404 on every route", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const mine = yield* create({ region: "nowhere" })
      const token = env.other.token
      for (
        const [method, path] of [
          ["GET", `/v1/sandboxes/${mine.id}`],
          ["DELETE", `/v1/sandboxes/${mine.id}`],
          ["POST", `/v1/sandboxes/${mine.id}/stop`],
          ["POST", `/v1/sandboxes/${mine.id}/start`],
          ["POST", `/v1/sandboxes/${mine.id}/exec`],
          ["GET", `/v1/sandboxes/${mine.id}/files?path=/`],
          ["PUT", `/v1/sandboxes/${mine.id}/files?path=/x`]
        ] as const
      ) {
        const body = path.endsWith("/exec") ? { body: { cmd: ["true"] } } : {}
        expectError(yield* api(method, path, { token, ...body }), 404, "not_found")
      }
      expectError(yield* api("POST", "/v1/sandboxes", { token, body: { parent_id: mine.id } }), 400, "invalid_request")
      const theirs = yield* api("GET", "/v1/sandboxes?paginated=false", { token })
      expect(theirs.json.rows.map((r: { id: string }) => r.id)).not.toContain(mine.id)
      expect((yield* get(mine.id)).json.state).not.toBe("deleted")
    }))

  it.effect("pagination: limit, offset, last page, past the end, paginated=false, state filters; bad values are 400", () =>
    Effect.gen(function*() {
      const identity = yield* Identity
      const org = yield* identity.org("pages")
      const ids: Array<string> = []
      for (let i = 0; i < 5; i++) ids.push((yield* create({ region: "nowhere", name: `n${i}` }, org.token)).id)
      const newest = [...ids].reverse()
      const list = (query: string) => api("GET", `/v1/sandboxes${query}`, { token: org.token })
      const page = (res: Answer) => ({
        ids: res.json.rows.map((r: { id: string }) => r.id),
        total: res.json.total,
        offset: res.json.offset,
        limit: res.json.limit,
        has_more: res.json.has_more
      })

      const empty = yield* api("GET", "/v1/sandboxes", { token: (yield* identity.org("empty")).token })
      expect(empty.json).toEqual({ rows: [], total: 0, offset: 0, limit: 50, has_more: false })
      expect(page(yield* list(""))).toEqual({ ids: newest, total: 5, offset: 0, limit: 50, has_more: false })
      expect(page(yield* list("?limit=2"))).toEqual({
        ids: newest.slice(0, 2),
        total: 5,
        offset: 0,
        limit: 2,
        has_more: true
      })
      expect(page(yield* list("?limit=2&offset=2"))).toEqual({
        ids: newest.slice(2, 4),
        total: 5,
        offset: 2,
        limit: 2,
        has_more: true
      })
      expect(page(yield* list("?limit=2&offset=4"))).toEqual({
        ids: newest.slice(4),
        total: 5,
        offset: 4,
        limit: 2,
        has_more: false
      })
      expect(page(yield* list("?offset=5"))).toEqual({ ids: [], total: 5, offset: 5, limit: 50, has_more: false })
      expect(page(yield* list("?offset=1000"))).toEqual({ ids: [], total: 5, offset: 1000, limit: 50, has_more: false })
      expect(page(yield* list("?limit=500"))).toMatchObject({ ids: newest, limit: 500 })
      expect(page(yield* list("?paginated=false&limit=1"))).toEqual({
        ids: newest,
        total: 5,
        offset: 0,
        limit: 5,
        has_more: false
      })
      expect(page(yield* list("?paginated=true&limit=1"))).toMatchObject({
        ids: newest.slice(0, 1),
        limit: 1,
        has_more: true
      })

      // All five ended in error (no host in "nowhere"); one is deleted to have two states.
      for (const id of ids) yield* waitState(id, "error", Duration.seconds(30), org.token)
      yield* api("DELETE", `/v1/sandboxes/${ids[0]}`, { token: org.token })
      expect(page(yield* list("?state=error")).ids).toEqual(newest.slice(0, 4))
      expect(page(yield* list("?state=deleted")).ids).toEqual([ids[0]])
      expect(page(yield* list("?state=deleted,error,deleted")).total).toBe(5)
      expect(page(yield* list("?state=running")).ids).toEqual([])
      expect(page(yield* list("?state=error&limit=1&offset=3"))).toEqual({
        ids: [newest[3]],
        total: 4,
        offset: 3,
        limit: 1,
        has_more: false
      })

      for (
        const bad of [
          "?limit=0",
          "?limit=501",
          "?limit=-1",
          "?limit=1.5",
          "?limit=abc",
          "?limit=",
          "?limit=1e2",
          "?offset=-1",
          "?offset=x",
          "?offset=99999999999",
          "?paginated=maybe",
          "?paginated=",
          "?paginated=TRUE",
          "?state=bogus",
          "?state=",
          "?state=running,",
          "?state=Running"
        ]
      ) {
        const res = yield* list(bad)
        expectError(res, 400, "invalid_request")
      }
    }))

  it.effect("GET /v1/workers lists the runtime and agent processes seen in the last 15 s, to any credential", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const identity = yield* Identity
      const res = yield* eventually(api("GET", "/v1/workers"), (r) => r.json?.workers?.length >= 2)
      expect(res.status).toBe(200)
      expect(Object.keys(res.json)).toEqual(["workers"])
      for (const w of res.json.workers) {
        expect(Object.keys(w).sort()).toEqual(["cells", "name", "prefix", "script_name", "version"])
        expect(w.cells).toBe(null)
      }
      const roles = res.json.workers.map((w: { script_name: string }) => w.script_name)
      expect(roles).toContain("runtime")
      expect(roles).toContain("agent")
      const agent = res.json.workers.find((w: { script_name: string }) => w.script_name === "agent")
      expect(agent.prefix).toBe(`${env.prefix}.agent.${env.hostId}.`)
      const runtime = res.json.workers.find((w: { script_name: string }) => w.script_name === "runtime")
      expect(runtime.prefix).toBe(`${env.prefix}.actor.`)
      const scoped = yield* identity.key(env.org.id, ["templates:read"])
      expect((yield* api("GET", "/v1/workers", { token: scoped })).status).toBe(200)
      expectError(yield* call(env.base, "GET", "/v1/workers"), 401, "unauthenticated")
    }))
})
