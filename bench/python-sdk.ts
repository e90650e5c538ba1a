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
import * as TestNats from "@svc/testing/TestNats"
import { appMain, readyEvent, spawnRole } from "@svc/testing/TestProcess"
import { Effect } from "effect"
import { execFile } from "node:child_process"
import * as Path from "node:path"
import { fileURLToPath } from "node:url"
import { serveApi } from "./lib/Api.ts"
import { agentEnv, benchHost } from "./lib/Hosts.ts"
import { runInProcess } from "./lib/InProcess.ts"
import { record } from "./lib/Report.ts"
import { runningSandbox } from "./lib/Sandboxes.ts"
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
  const { base, call, key } = yield* serveApi("bench-python")

  const host = yield* benchHost()
  yield* spawnRole({ main: appMain("agent"), env: agentEnv(server, host), ready: readyEvent("agent_ready") })

  const id = yield* runningSandbox(call, { name: "bench-python", region: "local", ram_mb: 64 }, 600)

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
