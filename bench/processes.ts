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
import * as TestNats from "@svc/testing/TestNats"
import { Effect } from "effect"
import * as Http from "node:http"
import * as Os from "node:os"
import { serveApi } from "./lib/Api.ts"
import { agentEnv, benchHost, startAgent, UNBOUNDED_HOST } from "./lib/Hosts.ts"
import { runInProcess } from "./lib/InProcess.ts"
import { sandboxMaker, watchSandboxEvents } from "./lib/Sandboxes.ts"
import { quantile } from "./lib/Stats.ts"

const EXECS = Number(process.env["BENCH_EXECS"] ?? 100)
const KEYS = Number(process.env["BENCH_KEYS"] ?? 300)

const ms = (n: number) => n.toFixed(1).padStart(9)

const platform = Effect.gen(function*() {
  const server = yield* TestNats.TestNatsServer
  const { base, key } = yield* serveApi()
  const events = yield* watchSandboxEvents

  // The agent, a process of its own.
  const host = yield* benchHost()
  yield* startAgent({ ...agentEnv(server, host), ...UNBOUNDED_HOST, SVC_AGENT_CONCURRENCY: "16" })

  const { createRunning } = yield* sandboxMaker({ base, key, events })

  const s = yield* createRunning({ name: "processes" })
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
