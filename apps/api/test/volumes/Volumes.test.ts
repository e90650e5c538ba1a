/**
 * The volume routes through the public API (docs/contract.md#volumes, #errors, #limits): the
 * record, `Idempotency-Key`, the capacity error body byte for byte, name rules, list and get
 * confined to the org, the scopes (a `sandbox:<id>` key is 403), and the org quota. The
 * sandboxes that use volumes are in VolumesSandboxes.test.ts.
 */
import { expect, layer } from "@effect/vitest"
import { serve } from "@svc/testing/TestHttp"
import { ConfigProvider, Effect, Layer } from "effect"
import { HttpRouter } from "effect/http"
import { execFile } from "node:child_process"
import * as NodePath from "node:path"
import * as Server from "../../src/Server.ts"
import { call } from "../../testing/Sandboxes.ts"
import {
  api,
  createVolume,
  Env,
  EnvLayer,
  expectError,
  Identity,
  runningSandbox,
  waitState
} from "./Volumes.support.ts"

/** An API with these settings beside the file's platform (same database and bus). */
const apiWith = (settings: Record<string, string>) =>
  serve(
    HttpRouter.serve(Server.Routes, { disableLogger: true, disableListenLog: true }).pipe(
      Layer.provide(ConfigProvider.layerAdd(ConfigProvider.fromUnknown(settings), { asPrimary: true }))
    )
  )

const MAIN = NodePath.resolve(import.meta.dirname, "../../../cli/src/main.ts")

/** The CLI in a process of its own, as a user runs it. */
const svc = (base: string, token: string, args: ReadonlyArray<string>) =>
  Effect.promise(() =>
    new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      execFile(process.execPath, [MAIN, ...args], {
        env: { ...process.env, SVC_API_URL: base, SVC_API_KEY: token }
      }, (error, stdout, stderr) => resolve({ code: error ? (error.code as number) ?? 1 : 0, stdout, stderr }))
    })
  )

const ID_BODY = /^[0-7][0-9a-hjkmnp-tv-z]{25}$/

layer(EnvLayer, { excludeTestServices: true, timeout: 180_000 })("volumes API", (it) => {
  it.effect("create: 201 the record; the same Idempotency-Key and body again: 200, the same record; another body: 422", () =>
    Effect.gen(function*() {
      const key = `vol-key-${Date.now()}`
      const first = yield* api("POST", "/v1/volumes", {
        body: { name: "scratch", size_gb: 2 },
        headers: { "idempotency-key": key }
      })
      expect(first.status, first.text).toBe(201)
      expect(first.json).toEqual({
        id: expect.stringMatching(/^vol_/),
        name: "scratch",
        type: "local",
        driver: "local",
        size_gb: 2,
        state: "available",
        mount_path: null,
        host_id: null,
        attachment_id: null,
        attached_to: null,
        device_path: null,
        auto_attach: {},
        attachments: [],
        createdAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
        deletedAt: null
      })
      // Key order and a spelled-out default are the same body.
      const again = yield* api("POST", "/v1/volumes", {
        body: { type: "local", size_gb: 2, name: "scratch" },
        headers: { "idempotency-key": key }
      })
      expect(again.status, again.text).toBe(200)
      expect(again.json).toEqual(first.json)
      const other = yield* api("POST", "/v1/volumes", {
        body: { name: "scratch-2", size_gb: 2 },
        headers: { "idempotency-key": key }
      })
      expectError(other, 422, "idempotency_key_reused")
      const list = yield* api("GET", "/v1/volumes")
      expect(list.json.volumes.filter((v: any) => v.name.startsWith("scratch")).map((v: any) => v.id)).toEqual([
        first.json.id
      ])
      // Keys outside 8 to 255 characters are refused.
      const short = yield* api("POST", "/v1/volumes", {
        body: { name: "short-key", size_gb: 1 },
        headers: { "idempotency-key": "1234567" }
      })
      expectError(short, 400, "invalid_request")
    }))

  it.effect("size_gb above SVC_VOLUME_MAX_GIB: exactly the error body of docs/contract.md#volumes", () =>
    Effect.gen(function*() {
      const res = yield* api("POST", "/v1/volumes", { body: { name: "huge", size_gb: 1025 } })
      expect(res.status).toBe(400)
      expect(res.text).toBe(
        "{\"error\":\"size_gb 1025 is above the maximum volume size of 1024 GiB\"," +
          "\"code\":\"volume_capacity_above_max\",\"requested_gib\":1025,\"max_gib\":1024,\"unit\":\"GiB\"}"
      )
      // The maximum is the operator's setting; at it, a volume is made.
      const env = yield* Env
      const base = yield* apiWith({ SVC_VOLUME_MAX_GIB: "8" })
      const over = yield* call(base, "POST", "/v1/volumes", { token: env.org.token, body: { size_gb: 9 } })
      expect(over.status).toBe(400)
      expect(over.json).toEqual({
        error: "size_gb 9 is above the maximum volume size of 8 GiB",
        code: "volume_capacity_above_max",
        requested_gib: 9,
        max_gib: 8,
        unit: "GiB"
      })
      const at = yield* call(base, "POST", "/v1/volumes", { token: env.org.token, body: { size_gb: 8 } })
      expect(at.status, at.text).toBe(201)
      // Not a size at all: a validation error, never the capacity one.
      for (const size_gb of [0, -1, 1.5, "2", null]) {
        const bad = yield* api("POST", "/v1/volumes", { body: { name: "bad-size", size_gb } })
        expectError(bad, 400, "invalid_request")
        expect(bad.json.issues.map((i: any) => i.path)).toEqual(["size_gb"])
      }
    }))

  it.effect("names: required for shared, derived from the id for an unnamed local volume, unique in the org", () =>
    Effect.gen(function*() {
      const shared = yield* api("POST", "/v1/volumes", { body: { type: "shared", size_gb: 1 } })
      expectError(shared, 400, "invalid_request")
      expect(shared.json.issues).toEqual([{ path: "name", message: "required for a shared volume" }])
      const unnamed = yield* createVolume({ size_gb: 1 })
      expect(unnamed.name).toBe(`volume-${unnamed.id.slice(4)}`)
      expect(unnamed.name.slice("volume-".length)).toMatch(ID_BODY)
      // That form is the derived names' only: a caller cannot take another volume's.
      const taken = yield* api("POST", "/v1/volumes", { body: { name: unnamed.name, size_gb: 1 } })
      expectError(taken, 400, "invalid_request")
      expect(taken.json.issues[0].path).toBe("name")
      const named = yield* createVolume({ name: "team-data", type: "shared", size_gb: 1 })
      expect(named).toMatchObject({ name: "team-data", type: "shared", host_id: null })
      const twice = yield* api("POST", "/v1/volumes", { body: { name: "team-data", size_gb: 1 } })
      expectError(twice, 409, "conflict")
      for (const name of ["", "   ", "x".repeat(121), "tab\there"]) {
        const bad = yield* api("POST", "/v1/volumes", { body: { name, size_gb: 1 } })
        expectError(bad, 400, "invalid_request")
      }
      const badType = yield* api("POST", "/v1/volumes", { body: { name: "nfs", type: "nfs", size_gb: 1 } })
      expectError(badType, 400, "invalid_request")
      // Another org may use the same name.
      const env = yield* Env
      const elsewhere = yield* createVolume({ name: "team-data", type: "shared", size_gb: 1 }, env.other.token)
      expect(elsewhere.id).not.toBe(named.id)
      // A deleted volume's name is free again.
      const deleted = yield* api("DELETE", `/v1/volumes/${named.id}`)
      expect(deleted.status, deleted.text).toBe(200)
      expect(deleted.json).toMatchObject({ id: named.id, state: "deleted", deletedAt: expect.any(String) })
      yield* createVolume({ name: "team-data", type: "shared", size_gb: 1 })
    }))

  it.effect("list and get are the org's own: another org's volume is 404 everywhere", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const mine = yield* createVolume({ name: "mine", size_gb: 3 })
      const got = yield* api("GET", `/v1/volumes/${mine.id}`)
      expect(got.status).toBe(200)
      expect(got.json).toEqual(mine)
      const list = yield* api("GET", "/v1/volumes?limit=2")
      expect(list.json).toMatchObject({ offset: 0, limit: 2, has_more: true })
      expect(list.json.volumes[0].id).toBe(mine.id)
      for (const [method, path] of [["GET", `/v1/volumes/${mine.id}`], ["DELETE", `/v1/volumes/${mine.id}`]] as const) {
        expectError(yield* api(method, path, { token: env.other.token }), 404, "not_found")
      }
      const theirs = yield* api("GET", "/v1/volumes", { token: env.other.token })
      expect(theirs.json.volumes.map((v: any) => v.id)).not.toContain(mine.id)
      expectError(yield* api("GET", "/v1/volumes/vol_00000000000000000000000000"), 404, "not_found")
      expectError(yield* api("GET", "/v1/volumes/not-an-id"), 400, "invalid_request")
      // Gone for good once deleted.
      expect((yield* api("DELETE", `/v1/volumes/${mine.id}`)).status).toBe(200)
      expectError(yield* api("GET", `/v1/volumes/${mine.id}`), 404, "not_found")
      expectError(yield* api("DELETE", `/v1/volumes/${mine.id}`), 404, "not_found")
    }))

  it.effect("scopes: volumes:read reads, volumes:write writes, a sandbox:<id> key is 403 without volume scopes", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const identity = yield* Identity
      const volume = yield* createVolume({ name: "scoped", size_gb: 1 })
      const reader = yield* identity.key(env.org.id, ["volumes:read"])
      const writer = yield* identity.key(env.org.id, ["volumes:write"])
      const sandboxesOnly = yield* identity.key(env.org.id, ["sandboxes:write"])
      expect((yield* api("GET", `/v1/volumes/${volume.id}`, { token: reader })).status).toBe(200)
      expect((yield* api("GET", "/v1/volumes", { token: reader })).status).toBe(200)
      const refused = yield* api("POST", "/v1/volumes", { token: reader, body: { size_gb: 1 } })
      expectError(refused, 403, "insufficient_scope")
      expect(refused.json.required_scope).toBe("volumes:write")
      expectError(yield* api("DELETE", `/v1/volumes/${volume.id}`, { token: reader }), 403, "insufficient_scope")
      expect((yield* api("POST", "/v1/volumes", { token: writer, body: { size_gb: 1 } })).status).toBe(201)
      expectError(yield* api("GET", "/v1/volumes", { token: sandboxesOnly }), 403, "insufficient_scope")

      // Attaching at sandbox create uses the volume: rw needs volumes:write, ro volumes:read.
      const rw = { volumes: [{ volume_id: volume.id, mount_path: "/data" }] }
      const noVolumes = yield* api("POST", "/v1/sandboxes", { token: sandboxesOnly, body: rw })
      expectError(noVolumes, 403, "insufficient_scope")
      expect(noVolumes.json.required_scope).toBe("volumes:write")
      const readOnlyKey = yield* identity.key(env.org.id, ["sandboxes:write", "volumes:read"])
      expectError(yield* api("POST", "/v1/sandboxes", { token: readOnlyKey, body: rw }), 403, "insufficient_scope")

      // A key confined to one sandbox: volumes are out of its reach (docs/contract.md#single-sandbox-scope), its sandbox is not.
      const sandbox = yield* runningSandbox({ region: env.a.region })
      const confined = yield* identity.key(env.org.id, [`sandbox:${sandbox.id}`])
      expect((yield* api("GET", `/v1/sandboxes/${sandbox.id}`, { token: confined })).status).toBe(200)
      for (
        const [method, path, body] of [
          ["GET", "/v1/volumes", undefined],
          ["GET", `/v1/volumes/${volume.id}`, undefined],
          ["POST", "/v1/volumes", { size_gb: 1 }],
          ["DELETE", `/v1/volumes/${volume.id}`, undefined]
        ] as const
      ) {
        const res = yield* api(method, path, { token: confined, ...(body !== undefined ? { body } : {}) })
        expect(res.status, `${method} ${path}: ${res.text}`).toBe(403)
      }
      const child = yield* api("POST", "/v1/sandboxes", { token: confined, body: rw })
      expectError(child, 403, "insufficient_scope")
      expect((yield* api("DELETE", `/v1/sandboxes/${sandbox.id}`)).status).toBe(202)
    }))

  it.effect("org quota: past SVC_ORG_MAX_VOLUMES a create is 429 quota_exceeded; a deleted volume frees its place", () =>
    Effect.gen(function*() {
      const identity = yield* Identity
      const org = yield* identity.org("volumes-quota")
      const base = yield* apiWith({ SVC_ORG_MAX_VOLUMES: "3" })
      const made: Array<string> = []
      for (let i = 0; i < 3; i++) {
        const res = yield* call(base, "POST", "/v1/volumes", { token: org.token, body: { size_gb: 1 } })
        expect(res.status, res.text).toBe(201)
        made.push(res.json.id)
      }
      const over = yield* call(base, "POST", "/v1/volumes", { token: org.token, body: { size_gb: 1 } })
      expect(over.status, over.text).toBe(429)
      expect(over.json).toEqual({
        error: expect.stringContaining("3 volumes"),
        code: "quota_exceeded",
        quota: "volumes",
        limit: 3
      })
      expect((yield* call(base, "DELETE", `/v1/volumes/${made[0]}`, { token: org.token })).status).toBe(200)
      const after = yield* call(base, "POST", "/v1/volumes", { token: org.token, body: { size_gb: 1 } })
      expect(after.status, after.text).toBe(201)
    }))

  it.effect("the CLI: svc volume create|list|get|delete, svc sandbox create --volume", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const run = (args: ReadonlyArray<string>) => svc(env.base, env.org.token, args)
      const created = yield* run([
        "volume",
        "create",
        "--name",
        "cli-vol",
        "--size",
        "1",
        "--idempotency-key",
        "cli-key-1",
        "--json"
      ])
      expect(created.code, created.stderr).toBe(0)
      const volume = JSON.parse(created.stdout)
      expect(volume).toMatchObject({ name: "cli-vol", type: "local", size_gb: 1, state: "available" })
      const again = yield* run([
        "volume",
        "create",
        "--name",
        "cli-vol",
        "--size",
        "1",
        "--idempotency-key",
        "cli-key-1",
        "--json"
      ])
      expect(JSON.parse(again.stdout).id).toBe(volume.id)
      const refused = yield* run(["volume", "create", "--type", "shared", "--size", "1"])
      expect(refused.code).toBe(1)
      expect(refused.stderr).toContain("error invalid_request")
      expect(refused.stderr).toContain("name: required for a shared volume")
      const huge = yield* run(["volume", "create", "--size", "4096"])
      expect(huge.stderr).toContain("error volume_capacity_above_max")

      const sandbox = yield* run([
        "sandbox",
        "create",
        "--region",
        env.a.region,
        "--volume",
        `${volume.id}:/data:sub:ro`,
        "--wait"
      ])
      expect(sandbox.code, sandbox.stderr).toBe(0)
      const record = JSON.parse(sandbox.stdout)
      expect(record.state).toBe("running")
      expect(record.volume_attachments[0]).toMatchObject({
        volume_id: volume.id,
        mount_path: "/data",
        subpath: "sub",
        mode: "ro"
      })
      const listed = yield* run(["volume", "list"])
      expect(listed.stdout).toContain(`${volume.id}  cli-vol  local  1 GiB  attached  ${record.id}:/data`)
      const got = yield* run(["volume", "get", volume.id])
      expect(JSON.parse(got.stdout).attached_to).toBe(record.id)
      const busy = yield* run(["volume", "delete", volume.id])
      expect(busy.code).toBe(1)
      expect(busy.stderr).toContain("error conflict")
      expect((yield* api("DELETE", `/v1/sandboxes/${record.id}`)).status).toBe(202)
      yield* waitState(record.id, "deleted")
      const deleted = yield* run(["volume", "delete", volume.id])
      expect(deleted.stdout, deleted.stderr).toContain(`${volume.id} deleted`)
    }), 180_000)
})
