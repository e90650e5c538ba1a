/**
 * Sandbox create → running with a volume attached, beside the plain create, in the same run.
 *   node bench/volumes.ts        (BENCH_SANDBOXES=30)
 *
 * A throwaway NATS and Postgres, the API and the runtime in this process, a host agent as a
 * child process with no warm pool (every create cold-boots, so the three kinds take the same
 * path and differ only by their volume). BENCH_SANDBOXES rounds, each one sandbox of each kind in
 * turn, timed from `POST /v1/sandboxes` answered to its running event read back from `EVENTS`:
 *   - plain: no volume;
 *   - local volume, new: a volume made just before (its image is formatted at this first start);
 *   - shared volume: one shared volume attached to every sandbox of this kind (mounted on the
 *     machine by the first).
 * Deletes everything it made before it exits.
 */
import { serve } from "@svc/testing/TestHttp"
import * as TestNats from "@svc/testing/TestNats"
import { Effect } from "effect"
import { HttpRouter } from "effect/http"
import { execFileSync, spawn } from "node:child_process"
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as NodePath from "node:path"
import { fileURLToPath } from "node:url"
import * as Server from "../apps/api/src/Server.ts"
import { ApiKeys } from "../packages/auth/src/ApiKeys.ts"
import { operatorContext } from "../packages/auth/src/Audit.ts"
import { Orgs } from "../packages/auth/src/Orgs.ts"
import { Nats } from "../packages/bus/src/Nats.ts"
import { makeHostId } from "../packages/domain/src/Ids.ts"
import * as Events from "../packages/events/src/Streams.ts"
import { CONTROLLERS } from "../packages/host/src/Driver/Cgroups.ts"
import { runInProcess } from "./lib/InProcess.ts"
import { quantile } from "./lib/Stats.ts"

const N = Number(process.env["BENCH_SANDBOXES"] ?? 30)
const AGENT_MAIN = fileURLToPath(new URL("../apps/agent/src/main.ts", import.meta.url))

const ms = (n: number) => n.toFixed(1).padStart(9)

const platform = Effect.gen(function*() {
  const nats = yield* Nats
  const server = yield* TestNats.TestNatsServer
  const base = yield* serve(HttpRouter.serve(Server.Routes, { disableLogger: true, disableListenLog: true }))
  const org = yield* (yield* Orgs).create("bench", operatorContext)
  const key = (yield* (yield* ApiKeys).mint({ orgId: org.id, userId: null, name: "bench" }, operatorContext)).token

  const runningAt = new Map<string, number>()
  const deleted = new Set<string>()
  const waiters = new Map<string, () => void>()
  const stream = yield* Events.ensure()
  const consumer = yield* Effect.promise(() => nats.js.consumers.get(stream))
  yield* Effect.acquireRelease(
    Effect.promise(() =>
      consumer.consume({
        callback: (msg) => {
          const e = JSON.parse(new TextDecoder().decode(msg.data))
          const id = e.data?.sandbox_id as string
          if (e.event === "sandbox.state_updated" && e.data.state === "running" && !runningAt.has(id)) {
            runningAt.set(id, performance.now())
            waiters.get(id)?.()
          }
          if (e.event === "sandbox.state_updated" && e.data.state === "error") waiters.get(id)?.()
          if (e.event === "sandbox.deleted") deleted.add(id)
        }
      })
    ),
    (m) => Effect.promise(() => m.close().catch(() => undefined))
  )

  const hostId = makeHostId()
  const dataDir = yield* Effect.acquireRelease(
    Effect.promise(() => Fs.mkdtemp("/tmp/svc-bench-volumes-")),
    (dir) =>
      Effect.promise(async () => {
        const shared = NodePath.join(dir, "shared")
        for (const name of await Fs.readdir(shared).catch(() => [] as Array<string>)) {
          if (name.endsWith(".mnt")) {
            try {
              execFileSync("umount", ["-l", NodePath.join(shared, name)], { stdio: "ignore" })
            } catch {
              // Not mounted.
            }
          }
        }
        await Fs.rm(dir, { recursive: true, force: true })
        for (const c of CONTROLLERS) {
          await Fs.rmdir(`/sys/fs/cgroup/${c}/svc-sandboxes/${hostId}`).catch(() => undefined)
        }
      })
  )
  yield* Effect.acquireRelease(
    Effect.callback<{ kill: () => void }>((resume) => {
      const child = spawn(process.execPath, [AGENT_MAIN], {
        env: {
          ...process.env,
          NATS_URL: server.url,
          SVC_NATS_PREFIX: server.prefix,
          SVC_HOST_ID: hostId,
          SVC_REGION: "local",
          SVC_HOST_CPU: "100000",
          SVC_HOST_RAM_MB: "100000000",
          SVC_HOST_DISK_GB: "1000000",
          SVC_AGENT_DATA_DIR: NodePath.join(dataDir, "host"),
          SVC_SHARED_VOLUMES_DIR: NodePath.join(dataDir, "shared"),
          SVC_AGENT_POOL_SIZE: "0",
          SVC_AGENT_CONCURRENCY: "16"
        },
        stdio: ["ignore", "pipe", "inherit"]
      })
      let out = ""
      child.stdout!.on("data", (chunk: Buffer) => {
        out += chunk.toString()
        if (out.includes("agent_ready")) resume(Effect.succeed({ kill: () => child.kill("SIGTERM") }))
      })
      child.on("exit", (code) => resume(Effect.die(new Error(`agent exited (${code})`))))
    }),
    (a) => Effect.sync(() => a.kill())
  )

  const call = (method: string, path: string, body?: object) =>
    Effect.promise(async () => {
      const response = await fetch(`${base}${path}`, {
        method,
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {})
      })
      return { status: response.status, json: await response.json() as any, at: performance.now() }
    })
  const sandboxes: Array<string> = []
  const volumes: Array<string> = []
  const volume = (body: object) =>
    Effect.gen(function*() {
      const r = yield* call("POST", "/v1/volumes", body)
      if (r.status !== 201) throw new Error(`volume: ${r.status} ${JSON.stringify(r.json)}`)
      volumes.push(r.json.id)
      return r.json.id as string
    })
  const createRunning = (body: object) =>
    Effect.gen(function*() {
      const r = yield* call("POST", "/v1/sandboxes", { region: "local", ram_mb: 64, ...body })
      if (r.status !== 201) throw new Error(`create: ${r.status} ${JSON.stringify(r.json)}`)
      sandboxes.push(r.json.id)
      yield* Effect.callback<void>((resume) => {
        if (runningAt.has(r.json.id)) return resume(Effect.void)
        waiters.set(r.json.id, () => resume(Effect.void))
      }).pipe(Effect.timeout("60 seconds"))
      const done = runningAt.get(r.json.id)
      if (done === undefined) throw new Error(`sandbox ${r.json.id} did not run`)
      return done - r.at
    })

  yield* Effect.addFinalizer(() =>
    Effect.gen(function*() {
      yield* Effect.forEach(sandboxes, (id) => Effect.ignore(call("DELETE", `/v1/sandboxes/${id}`)), {
        concurrency: 8,
        discard: true
      })
      const deadline = Date.now() + 120_000
      while (sandboxes.some((id) => !deleted.has(id)) && Date.now() < deadline) yield* Effect.sleep("100 millis")
      yield* Effect.forEach(volumes, (id) => Effect.ignore(call("DELETE", `/v1/volumes/${id}`)), {
        concurrency: 8,
        discard: true
      })
      console.log(`\ncleaned up: ${sandboxes.filter((id) => deleted.has(id)).length} of ${sandboxes.length} sandboxes`)
    })
  )

  // Warm-up: templates, JIT, connections, the shared volume's machine mount.
  const shared = yield* volume({ name: "bench-shared", type: "shared", size_gb: 1 })
  for (let i = 0; i < 3; i++) {
    yield* createRunning({})
    yield* createRunning({ volumes: [{ volume_id: yield* volume({ size_gb: 1 }), mount_path: "/data" }] })
    yield* createRunning({ volumes: [{ volume_id: shared, mount_path: "/shared" }] })
  }
  const plain: Array<number> = []
  const local: Array<number> = []
  const sharedTimes: Array<number> = []
  for (let i = 0; i < N; i++) {
    plain.push(yield* createRunning({}))
    const fresh = yield* volume({ size_gb: 1 })
    local.push(yield* createRunning({ volumes: [{ volume_id: fresh, mount_path: "/data" }] }))
    sharedTimes.push(yield* createRunning({ volumes: [{ volume_id: shared, mount_path: "/shared" }] }))
  }
  return { plain, local, shared: sharedTimes }
})

process.env.SVC_RATE_LIMIT_PER_SECOND = "100000"
process.env.SVC_RATE_LIMIT_BURST = "100000"
process.env.SVC_ORG_MAX_SANDBOXES = "100000"
process.env.SVC_ORG_MAX_RUNNING_SANDBOXES = "100000"
process.env.SVC_ORG_MAX_VOLUMES = "100000"
const result = await runInProcess(platform)
const base = quantile(result.plain, 0.5)
const row = (name: string, values: ReadonlyArray<number>) =>
  console.log(
    `${name.padEnd(40)}${ms(quantile(values, 0.5))}${ms(quantile(values, 0.99))}${
      (quantile(values, 0.5) / base).toFixed(2).padStart(11)
    }`
  )
console.log(`\ncreate → running, no warm pool, ${N} rounds (${Os.cpus().length} cores, kernel ${Os.release()})`)
console.log(`${"".padEnd(40)}${"p50 ms".padStart(9)}${"p99 ms".padStart(9)}${"p50/plain".padStart(11)}`)
row("plain", result.plain)
row("with a new local volume (1 GiB)", result.local)
row("with a shared volume (already mounted)", result.shared)
