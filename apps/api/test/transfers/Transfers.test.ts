/**
 * File transfers at scale, against the real processes: the API (apps/api/src/main.ts) and a host
 * agent (apps/agent/src/main.ts) each run as a child process, so that their resident memory can
 * be read alone from /proc/<pid>/status; the runtime runs in the test process.
 *
 * 100 transfers of 100 MiB at once (50 uploads, 50 downloads) keep each process within 256 MiB
 * of its idle resident memory (VmHWM, the kernel's peak, reset after the idle reading). The
 * bytes are generated as they are sent and hashed on both ends (SHA-1 here and `sha1sum` in the
 * sandbox): nothing holds a whole file, the test process included.
 */
import { expect, layer } from "@effect/vitest"
import { SecretBox } from "@svc/crypto/SecretBox"
import * as Runtime from "@svc/runtime/Runtime"
import * as TestDatabase from "@svc/testing/TestDatabase"
import * as TestNats from "@svc/testing/TestNats"
import { Context, Effect, Fiber, Layer, Scope } from "effect"
import { createHash } from "node:crypto"
import * as FsSync from "node:fs"
import * as Http from "node:http"
import { call, eventually, Identity } from "../../testing/Sandboxes.ts"
import * as Roles from "../support/Roles.ts"

const MIB = 1024 * 1024
const FILE_BYTES = 100 * MIB
const UPLOADS = 50
const DOWNLOADS = 50
const BOUND_BYTES = 256 * MIB

interface Memory {
  readonly rss: number
  readonly hwm: number
}

const memoryOf = (pid: number): Memory => {
  const status = FsSync.readFileSync(`/proc/${pid}/status`, "utf8")
  const kib = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? NaN) * 1024
  return { rss: kib("VmRSS"), hwm: kib("VmHWM") }
}

/** CPU seconds the process has used (utime + stime). */
const cpuOf = (pid: number): number => {
  const fields = FsSync.readFileSync(`/proc/${pid}/stat`, "utf8").replace(/^.*\) /, "").split(" ")
  return (Number(fields[11]) + Number(fields[12])) / 100
}

/** Resets the kernel's peak resident size (VmHWM) of the process to its current one. */
const resetPeak = (pid: number) => FsSync.writeFileSync(`/proc/${pid}/clear_refs`, "5")

class Env extends Context.Service<Env, {
  readonly base: string
  readonly token: string
  readonly apiPid: number
  readonly agentPid: number
  /** Another API process on the same platform, with `SVC_API_MAX_TRANSFERS` set; its base URL. */
  readonly otherApi: (maxTransfers: number) => Effect.Effect<string>
}>()("Transfers.test/Env") {}

const EnvLayer = Layer.effect(
  Env,
  Effect.gen(function*() {
    const agentPid = yield* Roles.spawnAgent({
      // Every transfer of the test in flight at once, on this host and in the API process.
      SVC_AGENT_MAX_TRANSFERS: String(UPLOADS + DOWNLOADS),
      // All of them from the test's one org.
      SVC_AGENT_MAX_TRANSFERS_PER_ORG: String(UPLOADS + DOWNLOADS),
      // 100 transfers at once on a busy 2-core machine can each wait minutes for a turn of
      // the CPU: what this file measures is memory, not the idle bound (transfers/Fairness's).
      SVC_AGENT_TRANSFER_IDLE_TIMEOUT: "10m"
    })
    const scope = yield* Effect.scope
    const nats = yield* TestNats.TestNatsServer
    const databaseUrl = yield* TestDatabase.TestDatabaseUrl
    const spawnApi = (maxTransfers: number) =>
      Roles.spawnApi({
        SVC_API_MAX_TRANSFERS: String(maxTransfers),
        // The test's one org may take every slot (its transfers wait for the process's).
        SVC_API_MAX_TRANSFERS_PER_ORG: String(UPLOADS + DOWNLOADS),
        SVC_API_TRANSFER_IDLE_TIMEOUT: "10m",
        // The test's own polling and 100 requests at once under one key.
        SVC_RATE_LIMIT_PER_SECOND: "1000",
        SVC_RATE_LIMIT_BURST: "1000"
      }).pipe(
        Effect.provideService(Scope.Scope, scope),
        Effect.provideService(TestNats.TestNatsServer, nats),
        Effect.provideService(TestDatabase.TestDatabaseUrl, databaseUrl)
      )
    const api = yield* spawnApi(UPLOADS + DOWNLOADS)
    const org = yield* (yield* Identity).org("transfers")
    return {
      base: api.base,
      token: org.token,
      apiPid: api.pid,
      agentPid,
      otherApi: (maxTransfers: number) => Effect.map(spawnApi(maxTransfers), (other) => other.base)
    }
  })
).pipe(
  Layer.provideMerge(Layer.mergeAll(Runtime.make({ supervisor: { intervalMs: 200 } }), Identity.layer)),
  Layer.provideMerge(Layer.mergeAll(TestDatabase.layerWithUrl, TestNats.layer, SecretBox.layer))
)

/** The bytes of upload `index`: 64 KiB chunks of a random pool, each stamped with (index, chunk). */
const pool = createHash("sha512").update("transfers").digest()
const poolBlock = Buffer.alloc(MIB)
for (let i = 0; i < poolBlock.length; i++) poolBlock[i] = pool[i % pool.length]! ^ ((i * 131) & 255)
const CHUNK = 64 * 1024
const chunkOf = (index: number, n: number): Buffer => {
  const chunk = Buffer.allocUnsafe(CHUNK)
  poolBlock.copy(chunk, 0, (n * CHUNK) % MIB, (n * CHUNK) % MIB + CHUNK)
  chunk.writeUInt32BE(index, 0)
  chunk.writeUInt32BE(n, 4)
  return chunk
}

interface Outcome {
  readonly status: number
  readonly bytes: number
  readonly sha1: string
  readonly body: string
}

const request = (
  base: string,
  token: string,
  method: string,
  path: string,
  headers: Record<string, string | number> = {}
) => {
  const url = new URL(path, base)
  return Http.request({
    host: url.hostname,
    port: Number(url.port),
    method,
    path: url.pathname + url.search,
    agent: false,
    headers: { authorization: `Bearer ${token}`, ...headers }
  })
}

/** PUTs `FILE_BYTES` generated bytes with backpressure, hashing what it sends. */
const upload = (base: string, token: string, sandboxId: string, index: number) =>
  new Promise<Outcome>((resolve, reject) => {
    const hash = createHash("sha1")
    const req = request(base, token, "PUT", `/v1/sandboxes/${sandboxId}/files?path=/srv/up/${index}.bin`, {
      "content-type": "application/octet-stream",
      "content-length": FILE_BYTES
    })
    req.on("error", reject)
    req.on("response", (res) => {
      let body = ""
      res.on("data", (c: Buffer) => (body += c.toString("utf8")))
      res.on("end", () => resolve({ status: res.statusCode ?? 0, bytes: sent, sha1: hash.digest("hex"), body }))
      res.on("error", reject)
    })
    let sent = 0
    let n = 0
    const write = () => {
      while (sent < FILE_BYTES) {
        const chunk = chunkOf(index, n++)
        hash.update(chunk)
        sent += chunk.length
        if (!req.write(chunk)) return void req.once("drain", write)
      }
      req.end()
    }
    write()
  })

/** GETs a file, hashing what arrives without keeping it. */
const download = (base: string, token: string, sandboxId: string, path: string, onResponse?: () => void) =>
  new Promise<Outcome>((resolve, reject) => {
    const hash = createHash("sha1")
    const req = request(base, token, "GET", `/v1/sandboxes/${sandboxId}/files?path=${encodeURIComponent(path)}`)
    req.on("error", reject)
    req.on("response", (res) => {
      onResponse?.()
      let bytes = 0
      let body = ""
      res.on("data", (c: Buffer) => {
        bytes += c.length
        if (res.statusCode === 200) hash.update(c)
        else body += c.toString("utf8")
      })
      res.on("end", () => resolve({ status: res.statusCode ?? 0, bytes, sha1: hash.digest("hex"), body }))
      res.on("error", reject)
    })
    req.end()
  })

layer(EnvLayer, { excludeTestServices: true, timeout: 600_000 })("file transfers at scale", (it) => {
  it.effect(
    "100 concurrent 100 MiB transfers keep the API's and the agent's resident memory within 256 MiB of idle; every byte arrives",
    () =>
      Effect.gen(function*() {
        const env = yield* Env
        const api = (method: string, path: string, body?: unknown) =>
          call(env.base, method, path, { token: env.token, ...(body !== undefined ? { body } : {}) })
        const exec = (script: string) =>
          Effect.gen(function*() {
            const res = yield* api("POST", `/v1/sandboxes/${sandbox.id}/exec`, {
              cmd: ["sh", "-c", script],
              timeout_ms: 600_000
            })
            // Refused: the sandbox's record (its state, stop_reason, error) says why.
            const record = res.status === 200 ? "" : (yield* api("GET", `/v1/sandboxes/${sandbox.id}`)).text
            expect(res.status, `${res.text}; the sandbox: ${record}`).toBe(200)
            expect(res.json.exit_code, res.text).toBe(0)
            return res.json.stdout as string
          })

        const created = yield* api("POST", "/v1/sandboxes", { disk_gb: 16, ram_mb: 1024 })
        expect(created.status, created.text).toBe(201)
        const sandbox = created.json as { id: string }
        yield* eventually(api("GET", `/v1/sandboxes/${sandbox.id}`), (r) => r.json?.state === "running")

        const sourceSha1 = (yield* exec(
          "mkdir -p /srv/up && head -c 104857600 /dev/urandom > /srv/source.bin && sha1sum /srv/source.bin"
        ))
          .split(" ")[0]!

        // Warm both processes up (code paths, connection pools), then take the idle reading.
        const warm = yield* Effect.promise(() => upload(env.base, env.token, sandbox.id, 999))
        expect(warm.status, warm.body).toBe(204)
        expect((yield* Effect.promise(() => download(env.base, env.token, sandbox.id, "/srv/up/999.bin"))).sha1).toBe(
          warm.sha1
        )
        yield* exec("rm -f /srv/up/999.bin")
        yield* Effect.sleep("1 second")
        const idle = { api: memoryOf(env.apiPid).rss, agent: memoryOf(env.agentPid).rss }
        resetPeak(env.apiPid)
        resetPeak(env.agentPid)

        const cpuBefore = { api: cpuOf(env.apiPid), agent: cpuOf(env.agentPid), test: process.cpuUsage() }
        let sampled = { api: 0, agent: 0 }
        const sampler = setInterval(() => {
          sampled = {
            api: Math.max(sampled.api, memoryOf(env.apiPid).rss),
            agent: Math.max(sampled.agent, memoryOf(env.agentPid).rss)
          }
        }, 100)
        const started = performance.now()
        const [uploads, downloads] = yield* Effect.promise(() =>
          Promise.all([
            Promise.all(Array.from({ length: UPLOADS }, (_, i) => upload(env.base, env.token, sandbox.id, i))),
            Promise.all(
              Array.from({ length: DOWNLOADS }, () => download(env.base, env.token, sandbox.id, "/srv/source.bin"))
            )
          ])
        ).pipe(Effect.ensuring(Effect.sync(() => clearInterval(sampler))))
        const seconds = (performance.now() - started) / 1000
        const peak = { api: memoryOf(env.apiPid).hwm, agent: memoryOf(env.agentPid).hwm }
        const testCpu = process.cpuUsage(cpuBefore.test)
        const cpu = {
          api: cpuOf(env.apiPid) - cpuBefore.api,
          agent: cpuOf(env.agentPid) - cpuBefore.agent,
          test: (testCpu.user + testCpu.system) / 1e6
        }

        for (const d of downloads) {
          expect(d.status, d.body).toBe(200)
          expect(d.bytes).toBe(FILE_BYTES)
          expect(d.sha1).toBe(sourceSha1)
        }
        for (const u of uploads) expect(u.status, u.body).toBe(204)
        // What each upload sent is what the sandbox holds (hashed by two execs side by side).
        const halves = yield* Effect.all(
          [0, 1].map((half) =>
            exec(`cd /srv/up && for f in *${half === 0 ? "[02468]" : "[13579]"}.bin; do sha1sum "$f"; done`)
          ),
          { concurrency: 2 }
        )
        const held = new Map(
          halves.join("").split("\n").filter((line) => line !== "").map((line) => {
            const [sum, name] = line.split(/\s+/)
            return [name!, sum!] as const
          })
        )
        expect(held.size).toBe(UPLOADS)
        uploads.forEach((u, i) => expect(held.get(`${i}.bin`), `upload ${i}`).toBe(u.sha1))
        yield* exec("rm -rf /srv/up")

        const mib = (n: number) => Math.round(n / MIB)
        console.log(
          `transfers: ${UPLOADS + DOWNLOADS} x ${mib(FILE_BYTES)} MiB in ${seconds.toFixed(1)} s; ` +
            `api idle ${mib(idle.api)} MiB, peak ${mib(peak.api)} (sampled ${mib(sampled.api)}); ` +
            `agent idle ${mib(idle.agent)} MiB, peak ${mib(peak.agent)} (sampled ${mib(sampled.agent)}); ` +
            `cpu s: api ${cpu.api.toFixed(1)}, agent ${cpu.agent.toFixed(1)}, test process ${cpu.test.toFixed(1)}`
        )
        expect(peak.api - idle.api).toBeLessThan(BOUND_BYTES)
        expect(peak.agent - idle.agent).toBeLessThan(BOUND_BYTES)
      }),
    600_000
  )

  it.effect(
    "an API process beyond SVC_API_MAX_TRANSFERS holds a transfer until a slot frees",
    () =>
      Effect.gen(function*() {
        const env = yield* Env
        const base = yield* env.otherApi(1)
        const api = (method: string, path: string, body?: unknown) =>
          call(base, method, path, { token: env.token, ...(body !== undefined ? { body } : {}) })
        const created = yield* api("POST", "/v1/sandboxes", { ram_mb: 256 })
        expect(created.status, created.text).toBe(201)
        const id = created.json.id as string
        yield* eventually(api("GET", `/v1/sandboxes/${id}`), (r) => r.json?.state === "running")
        const made = yield* api("POST", `/v1/sandboxes/${id}/exec`, {
          cmd: ["sh", "-c", "head -c 67108864 /dev/urandom > /big && sha1sum /big"]
        })
        const sha1 = (made.json.stdout as string).split(" ")[0]

        // A download whose client reads nothing holds the one slot (its bytes back up to the sandbox).
        const held = yield* Effect.callback<{ resume: () => void; done: Promise<Outcome> }>((resume) => {
          const req = request(base, env.token, "GET", `/v1/sandboxes/${id}/files?path=/big`)
          req.on("response", (res) => {
            res.pause()
            const hash = createHash("sha1")
            let bytes = 0
            const done = new Promise<Outcome>((resolveDone) => {
              res.on("data", (c: Buffer) => {
                hash.update(c)
                bytes += c.length
              })
              res.on(
                "end",
                () => resolveDone({ status: res.statusCode ?? 0, bytes, sha1: hash.digest("hex"), body: "" })
              )
            })
            resume(Effect.succeed({
              resume: () => res.resume(),
              done
            }))
          })
          req.end()
        })
        let answered = false
        const second = yield* Effect.forkChild(
          Effect.promise(() => download(base, env.token, id, "/big", () => (answered = true)))
        )
        // An exec is not a transfer.
        expect((yield* api("POST", `/v1/sandboxes/${id}/exec`, { cmd: ["true"] })).status).toBe(200)
        yield* Effect.sleep("1 second")
        expect(answered).toBe(false)
        held.resume()
        const first = yield* Effect.promise(() => held.done)
        const next = yield* Fiber.join(second)
        expect([first.status, first.bytes, first.sha1]).toEqual([200, 64 * MIB, sha1])
        expect([next.status, next.bytes, next.sha1]).toEqual([200, 64 * MIB, sha1])
        yield* api("DELETE", `/v1/sandboxes/${id}`)
      }),
    120_000
  )
})
