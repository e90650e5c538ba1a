/**
 * The Python SDK's overhead on the round trip that matters most (issue 31, "Performance"):
 *   node bench/python-sdk.ts        (BENCH_RUNS=5, BENCH_CALLS=40)
 *
 * Starts a throwaway NATS and Postgres, the API and the runtime role in this process and a host
 * agent as a child process, creates one sandbox, then runs one Python process (sdks/python/src)
 * that alternates, call by call, `sbx.exec("true")` through the SDK and the same request made
 * with a bare `http.client` connection (kept alive too: POST .../exec with
 * `{"cmd": ["sh", "-c", "true"]}`, the whole answer read and parsed). Each run is BENCH_CALLS of
 * each after 5 of each to warm up; the figures are the medians of the runs' medians, and the
 * ratio SDK / raw. Target: ≤ 1.5. Deletes the sandbox before it exits.
 */
import { serve } from "@svc/testing/TestHttp"
import * as TestNats from "@svc/testing/TestNats"
import { appMain, readyEvent, spawnRole } from "@svc/testing/TestProcess"
import { Effect } from "effect"
import { HttpRouter } from "effect/http"
import { execFile } from "node:child_process"
import * as Fs from "node:fs/promises"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import * as Server from "../apps/api/src/Server.ts"
import { ApiKeys } from "../packages/auth/src/ApiKeys.ts"
import { operatorContext } from "../packages/auth/src/Audit.ts"
import { Orgs } from "../packages/auth/src/Orgs.ts"
import { makeHostId } from "../packages/domain/src/Ids.ts"
import { cleanHost } from "./lib/Hosts.ts"
import { runInProcess } from "./lib/InProcess.ts"
import { record } from "./lib/Report.ts"
import { median } from "./lib/Stats.ts"

const RUNS = Number(process.env["BENCH_RUNS"] ?? 5)
const CALLS = Number(process.env["BENCH_CALLS"] ?? 40)
const ROOT = Path.resolve(fileURLToPath(import.meta.url), "../..")
const PYTHON = process.env["SVC_PYTHON"] ?? "python3"

// One key makes every call: the default rate limit (50/s per key) would turn the runs into 429s.
// The API runs in this process on `AuthLayer.layerWith`, whose settings are the defaults plus
// these (it reads no environment): the variables alone left the key at 50/s.
const UNLIMITED = { rateLimitPerSecond: 100_000, rateLimitBurst: 100_000 }
process.env["SVC_RATE_LIMIT_PER_SECOND"] = String(UNLIMITED.rateLimitPerSecond)
process.env["SVC_RATE_LIMIT_BURST"] = String(UNLIMITED.rateLimitBurst)

/** The measuring program: call by call, the SDK then the bare client; JSON of each run's medians (ms). */
const PROGRAM = `
import http.client, json, os, statistics, time, urllib.parse
from svc import Svc

url, key, sandbox_id = os.environ["SVC_API_URL"], os.environ["SVC_API_KEY"], os.environ["BENCH_SANDBOX"]
runs, calls = int(os.environ["BENCH_RUNS"]), int(os.environ["BENCH_CALLS"])
sbx = Svc().sandboxes.get(sandbox_id)
parts = urllib.parse.urlsplit(url)
conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
body = json.dumps({"cmd": ["sh", "-c", "true"]})
headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}

def raw():
    t = time.perf_counter()
    conn.request("POST", "/v1/sandboxes/" + sandbox_id + "/exec", body=body, headers=headers)
    response = conn.getresponse()
    answer = json.loads(response.read())
    assert response.status == 200 and answer["exit_code"] == 0, answer
    return (time.perf_counter() - t) * 1000

def sdk():
    t = time.perf_counter()
    assert sbx.exec("true")["exit_code"] == 0
    return (time.perf_counter() - t) * 1000

for _ in range(5):
    sdk(); raw()
out = {"sdk": [], "raw": []}
for _ in range(runs):
    s, r = [], []
    for _ in range(calls):
        s.append(sdk()); r.append(raw())
    out["sdk"].append(statistics.median(s)); out["raw"].append(statistics.median(r))
print(json.dumps(out))
`

const platform = Effect.gen(function*() {
  const server = yield* TestNats.TestNatsServer
  const base = yield* serve(HttpRouter.serve(Server.Routes, { disableLogger: true, disableListenLog: true }))
  const org = yield* (yield* Orgs).create("bench-python", operatorContext)
  const key = (yield* (yield* ApiKeys).mint({ orgId: org.id, userId: null, name: "bench" }, operatorContext)).token

  const hostId = makeHostId()
  const dataDir = yield* Effect.acquireRelease(
    Effect.promise(() => Fs.mkdtemp("/tmp/svc-bench-host-")),
    (dir) => cleanHost(hostId, dir)
  )
  yield* spawnRole({
    main: appMain("agent"),
    env: {
      NATS_URL: server.url,
      SVC_NATS_PREFIX: server.prefix,
      SVC_HOST_ID: hostId,
      SVC_REGION: "local",
      SVC_AGENT_DATA_DIR: dataDir
    },
    ready: readyEvent("agent_ready")
  })

  const call = (method: string, path: string, body?: object) =>
    Effect.promise(async () => {
      const response = await fetch(`${base}${path}`, {
        method,
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {})
      })
      return { status: response.status, json: await response.json() as { id: string; state: string } }
    })
  const waitFor = (id: string, state: string) =>
    Effect.gen(function*() {
      for (let i = 0; i < 600; i++) {
        const { json } = yield* call("GET", `/v1/sandboxes/${id}`)
        if (json.state === state) return
        if (json.state === "error") throw new Error(`sandbox ${id}: error`)
        yield* Effect.sleep("100 millis")
      }
      throw new Error(`sandbox ${id} is not ${state}`)
    })

  const created = yield* call("POST", "/v1/sandboxes", { name: "bench-python", region: "local", ram_mb: 64 })
  if (created.status !== 201) throw new Error(`create: ${created.status} ${JSON.stringify(created.json)}`)
  const id = created.json.id
  yield* Effect.addFinalizer(() =>
    Effect.gen(function*() {
      yield* call("DELETE", `/v1/sandboxes/${id}`)
      yield* Effect.ignore(waitFor(id, "deleted"))
    })
  )
  yield* waitFor(id, "running")

  return yield* Effect.promise(() =>
    new Promise<{ sdk: Array<number>; raw: Array<number> }>((resolve, reject) => {
      execFile(
        PYTHON,
        ["-c", PROGRAM],
        {
          env: {
            PATH: process.env["PATH"] ?? "/usr/bin:/bin",
            PYTHONPATH: Path.join(ROOT, "sdks/python/src"),
            PYTHONDONTWRITEBYTECODE: "1",
            SVC_API_URL: base,
            SVC_API_KEY: key,
            BENCH_SANDBOX: id,
            BENCH_RUNS: String(RUNS),
            BENCH_CALLS: String(CALLS)
          },
          timeout: 600_000
        },
        (
          error,
          stdout,
          stderr
        ) => (error ? reject(new Error(`${error.message}\n${stderr}`)) : resolve(JSON.parse(stdout)))
      )
    })
  )
})

const result = await runInProcess(platform, { auth: UNLIMITED })
const sdk = median(result.sdk)
const raw = median(result.raw)
console.log(
  `\nthe Python SDK's exec("true") against a bare http.client request (${RUNS} runs of ${CALLS} calls each)`
)
console.log(`  runs' medians, ms: SDK ${result.sdk.map((v) => v.toFixed(2)).join(", ")}`)
console.log(`                     raw ${result.raw.map((v) => v.toFixed(2)).join(", ")}`)
record({
  bench: "python-sdk",
  figure: `sbx.exec("true") round trip`,
  value: sdk,
  unit: "ms",
  baseline: raw,
  baselineName: "bare http.client, kept alive",
  ratio: sdk / raw,
  target: "ratio <= 1.5",
  met: sdk / raw <= 1.5,
  runs: RUNS
})
