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
import * as TestNats from "@svc/testing/TestNats"
import { Effect } from "effect"
import { execFileSync } from "node:child_process"
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as NodePath from "node:path"
import { CONTROLLERS } from "../packages/host/src/Driver/Cgroups.ts"
import { serveApi } from "./lib/Api.ts"
import { agentEnv, benchHost, startAgent, UNBOUNDED_HOST } from "./lib/Hosts.ts"
import { runInProcess } from "./lib/InProcess.ts"
import { sandboxMaker, watchSandboxEvents } from "./lib/Sandboxes.ts"
import { quantile } from "./lib/Stats.ts"

const N = Number(process.env["BENCH_SANDBOXES"] ?? 30)

const ms = (n: number) => n.toFixed(1).padStart(9)

const platform = Effect.gen(function*() {
  const server = yield* TestNats.TestNatsServer
  const { base, call, key } = yield* serveApi()
  const events = yield* watchSandboxEvents

  // The agent's data and the shared volumes' folder in one; the shared volumes' mounts go first.
  const host = yield* benchHost("/tmp/svc-bench-volumes-", (hostId, dir) =>
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
    }))
  yield* startAgent({
    ...agentEnv(server, host),
    ...UNBOUNDED_HOST,
    SVC_AGENT_DATA_DIR: NodePath.join(host.dataDir, "host"),
    SVC_SHARED_VOLUMES_DIR: NodePath.join(host.dataDir, "shared"),
    SVC_AGENT_POOL_SIZE: "0",
    SVC_AGENT_CONCURRENCY: "16"
  })

  // Volumes go once the sandboxes using them have (this finalizer runs after the sandboxes').
  const volumes: Array<string> = []
  yield* Effect.addFinalizer(() =>
    Effect.forEach(volumes, (id) => Effect.ignore(call("DELETE", `/v1/volumes/${id}`)), {
      concurrency: 8,
      discard: true
    })
  )
  const volume = (body: object) =>
    Effect.gen(function*() {
      const r = yield* call("POST", "/v1/volumes", body)
      if (r.status !== 201) throw new Error(`volume: ${r.status} ${JSON.stringify(r.json)}`)
      volumes.push(r.json.id)
      return r.json.id as string
    })
  const maker = yield* sandboxMaker({ base, key, events })
  const createRunning = (body: object) => Effect.map(maker.createRunning(body), (r) => r.latency)

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
