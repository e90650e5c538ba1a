/**
 * Forks through the API with a real agent: a running sandbox forked into several whose files
 * start as the source's at the fork (deletions included), with its env, ports, network policy and
 * template; each independent of the source and of its siblings; the source keeps running; a
 * `sandbox:<id>` key forks its own sandbox as children; refusals (count, unknown, stopped,
 * quota with nothing made, another sandbox's key); the shared snapshot released on the host once
 * no fork uses it.
 */
import { expect, layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import * as FsSync from "node:fs"
import * as NodePath from "node:path"
import { eventually, Identity } from "../../testing/Sandboxes.ts"
import { api, create, Env, EnvLayer, expectError, waitState } from "../../testing/SandboxesEnv.ts"

const sh = (id: string, script: string, token?: string) =>
  Effect.map(
    api("POST", `/v1/sandboxes/${id}/exec`, {
      body: { cmd: ["sh", "-c", script] },
      ...(token !== undefined ? { token } : {})
    }),
    (r) => {
      expect(r.status, r.text).toBe(200)
      return r.json as { exit_code: number; stdout: string; stderr: string }
    }
  )

const fork = (id: string, body: Record<string, unknown>, token?: string) =>
  api("POST", `/v1/sandboxes/${id}/fork`, { body, ...(token !== undefined ? { token } : {}) })

const remove = (id: string) =>
  Effect.gen(function*() {
    yield* api("DELETE", `/v1/sandboxes/${id}`)
    yield* waitState(id, "deleted")
  })

/** Fork snapshots on the agent's host (their markers; the layers beside them). */
const snapshotsOnHost = Effect.map(Effect.service(Env), (env) => {
  try {
    return FsSync.readdirSync(NodePath.join(env.dataDir, "forks"))
  } catch {
    return []
  }
})

layer(EnvLayer, { excludeTestServices: true, timeout: 240_000 })("sandbox forks", (it) => {
  it.effect("forks start from the source's files, with its settings, and are independent of it and of each other", () =>
    Effect.gen(function*() {
      const source = yield* create({
        env: { GREETING: "hello from the source" },
        exposed_ports: [8080],
        network: { deny_out: ["203.0.113.0/24"] },
        metadata: { role: "source" }
      })
      yield* waitState(source.id, "running")
      yield* sh(
        source.id,
        "mkdir -p /work && echo one > /work/a && head -c 100000 /dev/urandom > /work/big && rm /etc/hostname"
      )
      const sum = (yield* sh(source.id, "md5sum /work/big")).stdout

      const res = yield* fork(source.id, { count: 3, name: "explore", metadata: { role: "fork" } })
      expect(res.status, res.text).toBe(201)
      const forks = res.json.sandboxes as Array<Record<string, any>>
      expect(forks.map((f) => f.name)).toEqual(["explore-1", "explore-2", "explore-3"])
      for (const f of forks) {
        expect(f).toMatchObject({
          state: "pending",
          templateId: source.templateId,
          cpu: source.cpu,
          ramMb: source.ramMb,
          diskGb: source.diskGb,
          exposedPorts: [8080],
          network: { allow_out: [], deny_out: ["203.0.113.0/24"] },
          metadata: { role: "fork" },
          hostId: source.hostId
        })
        expect(f.id).not.toBe(source.id)
      }
      // Written after the fork was answered: not in the forks.
      yield* sh(source.id, "echo two > /work/a")

      for (const f of forks) yield* waitState(f.id, "running")
      for (const f of forks) {
        const seen = yield* sh(
          f.id,
          "cat /work/a; md5sum /work/big; test -e /etc/hostname || echo gone; echo $GREETING"
        )
        expect(seen.stdout).toBe(`one\n${sum}gone\nhello from the source\n`)
      }
      // Each fork's writes are its own.
      yield* sh(forks[0]!.id, "echo mine > /work/a; echo new > /work/b")
      expect((yield* sh(forks[1]!.id, "cat /work/a; test -e /work/b || echo none")).stdout).toBe("one\nnone\n")
      expect((yield* sh(source.id, "cat /work/a; test -e /work/b || echo none")).stdout).toBe("two\nnone\n")
      expect((yield* sh(forks[0]!.id, "cat /work/a /work/b")).stdout).toBe("mine\nnew\n")
      // The source kept running throughout.
      expect((yield* api("GET", `/v1/sandboxes/${source.id}`)).json.state).toBe("running")

      // Default count and name: one fork named by its id, the source's metadata.
      const one = yield* fork(source.id, {})
      expect(one.status, one.text).toBe(201)
      expect(one.json.sandboxes).toHaveLength(1)
      expect(one.json.sandboxes[0]).toMatchObject({ name: one.json.sandboxes[0].id, metadata: { role: "source" } })
      yield* waitState(one.json.sandboxes[0].id, "running")
      expect((yield* sh(one.json.sandboxes[0].id, "cat /work/a")).stdout).toBe("two\n")

      // Two fork requests, two snapshots; released once no fork stacks them.
      expect((yield* snapshotsOnHost).length).toBe(2)
      for (const f of [...forks, one.json.sandboxes[0]]) yield* remove(f.id)
      yield* eventually(snapshotsOnHost, (names) => names.length === 0, Duration.seconds(60))
      yield* remove(source.id)
    }))

  it.effect("a sandbox-scoped key forks its own sandbox as children, and no other", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const identity = yield* Identity
      const own = yield* create({})
      const other = yield* create({})
      yield* waitState(own.id, "running")
      yield* waitState(other.id, "running")
      const key = yield* identity.key(env.org.id, [`sandbox:${own.id}`])
      yield* sh(own.id, "echo kept > /root/note", key)

      const res = yield* fork(own.id, { count: 2 }, key)
      expect(res.status, res.text).toBe(201)
      for (const f of res.json.sandboxes) {
        expect(f.parentId).toBe(own.id)
        yield* waitState(f.id, "running", Duration.seconds(30), key)
        expect((yield* sh(f.id, "cat /root/note", key)).stdout).toBe("kept\n")
      }
      expectError(yield* fork(other.id, {}, key), 403, "sandbox_out_of_scope")
      // A key without sandboxes:write may not fork.
      const reader = yield* identity.key(env.org.id, ["sandboxes:read"])
      expectError(yield* fork(own.id, {}, reader), 403, "insufficient_scope")

      // Its forks go with it.
      yield* remove(own.id)
      for (const f of res.json.sandboxes) yield* waitState(f.id, "deleted")
      yield* remove(other.id)
    }))

  it.effect("refusals: count out of bounds, unknown, another org's, not running, past the quota with nothing made", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const source = yield* create({})
      yield* waitState(source.id, "running")
      for (const body of [{ count: 0 }, { count: 21 }, { count: 1.5 }, { count: "2" }, { name: "" }, { metadata: 3 }]) {
        expectError(yield* fork(source.id, body), 400, "invalid_request")
      }
      expectError(yield* fork("sbx_00000000000000000000000000", {}), 404, "not_found")
      expectError(yield* fork(source.id, {}, env.other.token), 404, "not_found")

      // Past the running quota (20 by default; the source is one): 429, and no sandbox made.
      const before = (yield* api("GET", "/v1/sandboxes")).json.total
      const snapshots = yield* snapshotsOnHost
      const over = yield* fork(source.id, { count: 20 })
      expect(over.status, over.text).toBe(429)
      expect(over.json.code).toBe("quota_exceeded")
      expect((yield* api("GET", "/v1/sandboxes")).json.total).toBe(before)
      // Refused before any copy was made.
      expect(yield* snapshotsOnHost).toEqual(snapshots)

      yield* api("POST", `/v1/sandboxes/${source.id}/stop`)
      yield* waitState(source.id, "stopped")
      expectError(yield* fork(source.id, {}), 409, "conflict")
      yield* remove(source.id)
      expectError(yield* fork(source.id, {}), 409, "conflict")
    }))
})
