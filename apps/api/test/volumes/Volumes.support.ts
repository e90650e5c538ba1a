/**
 * One platform for the volume tests of a file: the API over HTTP, the runtime role, two real
 * agents on this machine in regions `vola` (host A, 32 GiB of memory) and `volb` (host B, 64
 * GiB: a sandbox asking for no region goes there unless something else decides), sharing one
 * folder of shared volumes as two agents of one machine do; two orgs with a key each. At the end,
 * the shared volumes' mounts are undone and the folder removed.
 */
import { expect } from "@effect/vitest"
import { startAgent as startAgentFixture } from "@svc/agent/testing/Agent"
import { SecretBox } from "@svc/crypto/SecretBox"
import type { OrgId } from "@svc/domain/Ids"
import * as Runtime from "@svc/runtime/Runtime"
import * as TestDatabase from "@svc/testing/TestDatabase"
import * as TestNats from "@svc/testing/TestNats"
import { Context, Duration, Effect, Layer } from "effect"
import { execFileSync } from "node:child_process"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { type Answer, call, eventually, Identity, makeHost, serveApi } from "../../testing/Sandboxes.ts"

export interface Host {
  readonly hostId: string
  readonly dataDir: string
  readonly region: string
}

export class Env extends Context.Service<Env, {
  readonly base: string
  readonly a: Host
  readonly b: Host
  readonly sharedDir: string
  readonly org: { readonly id: OrgId; readonly token: string }
  readonly other: { readonly id: OrgId; readonly token: string }
}>()("Volumes.support/Env") {}

/** Undoes the shared volumes' machine mounts (lazily) and removes the folder. */
const removeSharedDir = (dir: string) =>
  Effect.promise(async () => {
    for (const name of await Fs.readdir(dir).catch(() => [] as Array<string>)) {
      if (!name.endsWith(".mnt")) continue
      try {
        execFileSync("umount", ["-l", NodePath.join(dir, name)], { stdio: "ignore" })
      } catch {
        // Not mounted.
      }
    }
    await Fs.rm(dir, { recursive: true, force: true })
  })

export const EnvLayer = Layer.effect(
  Env,
  Effect.gen(function*() {
    const base = yield* serveApi
    const identity = yield* Identity
    const sharedDir = yield* Effect.acquireRelease(
      Effect.promise(() => Fs.mkdtemp("/tmp/svc-shared-volumes-test-")),
      removeSharedDir
    )
    const a = yield* makeHost
    const b = yield* makeHost
    const capacity = (ramMb: number) => ({ cpu: 64, ramMb, diskGb: 500 })
    yield* startAgentFixture(a, { region: "vola", capacity: capacity(32 * 1024), sharedVolumesDir: sharedDir })
    yield* startAgentFixture(b, { region: "volb", capacity: capacity(64 * 1024), sharedVolumesDir: sharedDir })
    return {
      base,
      a: { ...a, region: "vola" },
      b: { ...b, region: "volb" },
      sharedDir,
      org: yield* identity.org("volumes-a"),
      other: yield* identity.org("volumes-b")
    }
  })
).pipe(
  Layer.provideMerge(Layer.mergeAll(
    Runtime.make({ supervisor: { intervalMs: 200, transitionTimeoutMs: 20_000 } }),
    Identity.layer
  )),
  Layer.provideMerge(Layer.mergeAll(TestDatabase.layerWithUrl, TestNats.layer, SecretBox.layer))
)

export const api = (method: string, path: string, options: Parameters<typeof call>[3] = {}) =>
  Effect.flatMap(Effect.service(Env), (env) => call(env.base, method, path, { token: env.org.token, ...options }))

export const createVolume = (body: Record<string, unknown>, token?: string) =>
  Effect.gen(function*() {
    const res = yield* api("POST", "/v1/volumes", { body, ...(token !== undefined ? { token } : {}) })
    expect(res.status, res.text).toBe(201)
    return res.json as Record<string, any>
  })

export const createSandbox = (body: Record<string, unknown>) =>
  Effect.gen(function*() {
    const res = yield* api("POST", "/v1/sandboxes", { body })
    expect(res.status, res.text).toBe(201)
    return res.json as Record<string, any>
  })

export const waitState = (id: string, state: string, timeout: Duration.Input = Duration.seconds(60)) =>
  Effect.map(
    eventually(
      api("GET", `/v1/sandboxes/${id}`),
      (r) => r.json?.state === state || (r.json?.state === "error" && state !== "error"),
      timeout
    ),
    (r) => {
      expect(r.json.state, JSON.stringify(r.json)).toBe(state)
      return r.json as Record<string, any>
    }
  )

/** A running sandbox with these fields. */
export const runningSandbox = (body: Record<string, unknown>) =>
  Effect.flatMap(createSandbox(body), (s) => waitState(s.id, "running"))

export const sh = (sandboxId: string, script: string) =>
  Effect.map(
    api("POST", `/v1/sandboxes/${sandboxId}/exec`, { body: { cmd: ["sh", "-c", script], timeout_ms: 120_000 } }),
    (res) => {
      expect(res.status, res.text).toBe(200)
      return res.json as { exit_code: number; stdout: string; stderr: string }
    }
  )

export const deleteSandbox = (id: string) =>
  Effect.gen(function*() {
    const res = yield* api("DELETE", `/v1/sandboxes/${id}`)
    expect(res.status, res.text).toBe(202)
    return yield* waitState(id, "deleted")
  })

export const getVolume = (id: string) =>
  Effect.map(api("GET", `/v1/volumes/${id}`), (r) => r.json as Record<string, any>)

export const expectError = (res: Answer, status: number, code: string) => {
  expect(res.status, res.text).toBe(status)
  expect(res.json.code, res.text).toBe(code)
  expect(typeof res.json.error).toBe("string")
}

export const exists = (path: string) => FsSync.existsSync(path)

/** Whether a loop device holds `image` (the kernel's own list, /sys/block). */
export const isAttached = (image: string) =>
  FsSync.readdirSync("/sys/block").filter((name) => name.startsWith("loop")).some((name) => {
    try {
      return FsSync.readFileSync(`/sys/block/${name}/loop/backing_file`, "utf8").trim() === image
    } catch {
      return false
    }
  })

export { eventually, Identity }
