/**
 * Processes and the terminal through the whole platform (docs/contract.md#sandbox-processes,
 * #terminal), against a plain exec in the same run:
 *   node bench/processes.ts        (BENCH_EXECS=100, BENCH_KEYS=300)
 *
 * Starts a throwaway NATS and Postgres, the API and the runtime role in this process and a host
 * agent as a child process, creates one sandbox, then measures:
 *   - streamed exec first byte: POST .../exec with `Accept: text/event-stream` → its first
 *     `stdout` event, against a plain exec of the same command (POST → whole answer), alternated,
 *     BENCH_EXECS each, p50 and p99 and the ratio of the p50s;
 *   - terminal round trip: a key sent on the /terminal WebSocket → its echo back, BENCH_KEYS keys
 *     one after the other, p50 and p99.
 * Deletes what it made before it exits.
 */
import { WebSocket } from "@effect/platform-node/NodeWS"
import { serve } from "@svc/testing/TestHttp"
import * as TestNats from "@svc/testing/TestNats"
import { Effect } from "effect"
import { HttpRouter } from "effect/http"
import { spawn } from "node:child_process"
import * as Fs from "node:fs/promises"
import * as Http from "node:http"
import * as Os from "node:os"
import { fileURLToPath } from "node:url"
import * as Server from "../apps/api/src/Server.ts"
import { ApiKeys } from "../packages/auth/src/ApiKeys.ts"
import { operatorContext } from "../packages/auth/src/Audit.ts"
import { Orgs } from "../packages/auth/src/Orgs.ts"
import { Nats } from "../packages/bus/src/Nats.ts"
import { makeHostId } from "../packages/domain/src/Ids.ts"
import * as Events from "../packages/events/src/Streams.ts"
import { cleanHost } from "./lib/Hosts.ts"
import { runInProcess } from "./lib/InProcess.ts"
import { quantile } from "./lib/Stats.ts"

const EXECS = Number(process.env["BENCH_EXECS"] ?? 100)
const KEYS = Number(process.env["BENCH_KEYS"] ?? 300)
const AGENT_MAIN = fileURLToPath(new URL("../apps/agent/src/main.ts", import.meta.url))

const ms = (n: number) => n.toFixed(1).padStart(9)

const platform = Effect.gen(function*() {
  const nats = yield* Nats
  const server = yield* TestNats.TestNatsServer
  const base = yield* serve(HttpRouter.serve(Server.Routes, { disableLogger: true, disableListenLog: true }))
  const org = yield* (yield* Orgs).create("bench", operatorContext)
  const key = (yield* (yield* ApiKeys).mint({ orgId: org.id, userId: null, name: "bench" }, operatorContext)).token

  // Running events, by sandbox id, as they reach the EVENTS stream.
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

  // The agent, a process of its own.
  const hostId = makeHostId()
  const dataDir = yield* Effect.acquireRelease(
    Effect.promise(() => Fs.mkdtemp("/tmp/svc-bench-host-")),
    (dir) => cleanHost(hostId, dir)
  )
  yield* Effect.acquireRelease(
    Effect.callback<{ pid: number; kill: () => void }>((resume) => {
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
          SVC_AGENT_DATA_DIR: dataDir,
          SVC_AGENT_CONCURRENCY: "16"
        },
        stdio: ["ignore", "pipe", "inherit"]
      })
      let out = ""
      child.stdout!.on("data", (chunk: Buffer) => {
        out += chunk.toString()
        if (out.includes("agent_ready")) resume(Effect.succeed({ pid: child.pid!, kill: () => child.kill("SIGTERM") }))
      })
      child.on("exit", (code) => resume(Effect.die(new Error(`agent exited (${code})`))))
    }),
    (a) => Effect.sync(() => a.kill())
  )

  const post = (body: object) =>
    Effect.promise(async () => {
      const response = await fetch(`${base}/v1/sandboxes`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify(body)
      })
      const json = await response.json() as { id: string }
      if (response.status !== 201) throw new Error(`create: ${response.status} ${JSON.stringify(json)}`)
      return { id: json.id, at: performance.now() }
    })
  const running = (id: string) =>
    Effect.callback<void>((resume) => {
      if (runningAt.has(id)) return resume(Effect.void)
      waiters.set(id, () => resume(Effect.void))
    })
  const made: Array<string> = []
  const createRunning = (name: string) =>
    Effect.gen(function*() {
      const t = yield* post({ region: "local", ram_mb: 64, name })
      made.push(t.id)
      yield* running(t.id).pipe(Effect.timeout("60 seconds"))
      const done = runningAt.get(t.id)
      if (done === undefined) throw new Error(`sandbox ${t.id} did not run`)
      return { id: t.id, posted: t.at, latency: done - t.at }
    })

  // Everything this run made goes, whatever happens.
  yield* Effect.addFinalizer(() =>
    Effect.gen(function*() {
      const t0 = performance.now()
      yield* Effect.forEach(made, (id) =>
        Effect.promise(async () => {
          for (let attempt = 0; attempt < 5; attempt++) {
            const r = await fetch(`${base}/v1/sandboxes/${id}`, {
              method: "DELETE",
              headers: { authorization: `Bearer ${key}` }
            })
            await r.arrayBuffer()
            if (r.status === 202) return
            await new Promise((resolve) => setTimeout(resolve, 500))
          }
          console.log(`could not delete ${id}`)
        }), { concurrency: 8, discard: true })
      const deadline = Date.now() + 120_000
      while (made.some((id) => !deleted.has(id)) && Date.now() < deadline) yield* Effect.sleep("100 millis")
      const n = made.filter((id) => deleted.has(id)).length
      console.log(
        `\ncleaned up: ${n} of ${made.length} sandboxes deleted through the API in ${
          ((performance.now() - t0) / 1000).toFixed(1)
        } s`
      )
    })
  )

  const s = yield* createRunning("processes")
  const id = s.id

  /** A plain exec: POST → the whole answer. */
  const plainExec = Effect.promise(async () => {
    const t0 = performance.now()
    const r = await fetch(`${base}/v1/sandboxes/${id}/exec`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ cmd: ["echo", "hi"] })
    })
    await r.arrayBuffer()
    if (r.status !== 200) throw new Error(`exec: ${r.status}`)
    return performance.now() - t0
  })
  /** A streamed exec: POST → its first stdout event (the rest is read, not timed). */
  const streamedExec = Effect.promise(() =>
    new Promise<number>((resolve, reject) => {
      const t0 = performance.now()
      const url = new URL(`${base}/v1/sandboxes/${id}/exec`)
      let first: number | undefined
      let text = ""
      const request = Http.request({
        host: url.hostname,
        port: url.port,
        path: url.pathname,
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json", accept: "text/event-stream" }
      }, (response) => {
        response.setEncoding("utf8")
        response.on("data", (chunk: string) => {
          text += chunk
          if (first === undefined && text.includes("event: stdout")) first = performance.now() - t0
        })
        response.on("end", () => (first === undefined ? reject(new Error(text)) : resolve(first)))
      })
      request.on("error", reject)
      request.end(JSON.stringify({ cmd: ["echo", "hi"] }))
    })
  )
  for (let i = 0; i < 5; i++) {
    yield* plainExec
    yield* streamedExec
  }
  const plain: Array<number> = []
  const streamed: Array<number> = []
  for (let i = 0; i < EXECS; i++) {
    plain.push(yield* plainExec)
    streamed.push(yield* streamedExec)
  }

  // The terminal: one key at a time, the clock stops when its echo comes back.
  const keys = yield* Effect.promise(() =>
    new Promise<Array<number>>((resolve, reject) => {
      const ws = new WebSocket(`${base.replace(/^http/, "ws")}/terminal?sandbox_id=${id}`, {
        headers: { authorization: `Bearer ${key}` }
      })
      const times: Array<number> = []
      let screen = ""
      let waiting: { char: string; at: number } | undefined
      let ready = false
      const next = () => {
        if (times.length === KEYS) {
          ws.close()
          return resolve(times)
        }
        // A line of 50 keys, then Ctrl-U (kill the line) to keep it short; letters a..y.
        if (times.length > 0 && times.length % 50 === 0 && waiting === undefined) {
          ws.send(Buffer.from([0x15]), { binary: true })
        }
        const char = String.fromCharCode(97 + (times.length % 25))
        screen = ""
        waiting = { char, at: performance.now() }
        ws.send(Buffer.from(char), { binary: true })
      }
      ws.on("message", (data: Buffer, isBinary: boolean) => {
        if (!isBinary) return
        screen += data.toString("utf8")
        if (!ready) {
          if (screen.includes("$ ") || screen.includes("# ")) {
            ready = true
            setTimeout(next, 200)
          }
          return
        }
        if (waiting !== undefined && screen.includes(waiting.char)) {
          times.push(performance.now() - waiting.at)
          waiting = undefined
          next()
        }
      })
      ws.on("error", reject)
    })
  )
  return { plain, streamed, keys }
})

const result = await runInProcess(platform)
const row = (name: string, values: ReadonlyArray<number>) =>
  console.log(`${name.padEnd(50)}${ms(quantile(values, 0.5))}${ms(quantile(values, 0.99))}${ms(Math.max(...values))}`)
console.log(`\nprocesses and the terminal (${Os.cpus().length} cores, kernel ${Os.release()})`)
console.log(`${"".padEnd(50)}${"p50 ms".padStart(9)}${"p99 ms".padStart(9)}${"max ms".padStart(9)}`)
row(`plain exec \`echo hi\`: POST → answer (${EXECS})`, result.plain)
row(`streamed exec: POST → first stdout event (${EXECS})`, result.streamed)
console.log(
  `${"streamed first byte / plain exec (p50)".padEnd(50)}${
    (quantile(result.streamed, 0.5) / quantile(result.plain, 0.5)).toFixed(2).padStart(9)
  }`
)
row(`terminal: key → echo (${KEYS} keys)`, result.keys)
console.log(
  `${"terminal round trip / plain exec (p50)".padEnd(50)}${
    (quantile(result.keys, 0.5) / quantile(result.plain, 0.5)).toFixed(2).padStart(9)
  }`
)
