/**
 * Revocation propagation between two API processes sharing Postgres and NATS: a key is warmed
 * into process B's cache, DELETE goes to process A, and the clock stops when B refuses the key
 * (polled from the moment DELETE returns). Median of 25. Target: < 50 ms. (The authenticated
 * request's throughput is bench/api.ts.)
 *   npm run bench auth     (or: node bench/auth.ts)
 */
import { freePort, startNats, startPostgres, waitForPort } from "@svc/local-servers/Servers"
import { useTestEncryptionKeys } from "@svc/testing/TestSecrets"
import { type ChildProcess, spawn } from "node:child_process"
import { fmt } from "./lib/Measure.ts"
import { record } from "./lib/Report.ts"
import { median } from "./lib/Stats.ts"

const REVOCATIONS = Number(process.env.BENCH_REVOCATIONS ?? 25)

/**
 * The benchmark needs the throughput of the server, not of the per-key rate limit; the
 * revocation runs poll revoked keys from one address, not the limit of failed credentials.
 */
const NO_RATE_LIMIT = {
  SVC_RATE_LIMIT_PER_SECOND: "100000000",
  SVC_RATE_LIMIT_BURST: "100000000",
  SVC_FAILED_AUTH_RATE_PER_MINUTE: "100000000",
  SVC_FAILED_AUTH_RATE_BURST: "100000000"
}

const [nats, pg] = await Promise.all([startNats(), startPostgres()])
process.env.SVC_TEST_NATS_URL = nats.url
process.env.SVC_TEST_DATABASE_URL = pg.url
useTestEncryptionKeys()

const json = async (res: Response) => ({ status: res.status, body: await res.json().catch(() => null) as any })

/** Signs up on the API at `base` and mints a `*` key with the session, as a user would. */
const bootstrap = async (base: string): Promise<{ readonly token: string }> => {
  const email = `bench-${Date.now()}-${Math.random().toString(36).slice(2)}@example.com`
  const up = await fetch(`${base}/v1/auth/sign-up`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ email, password: "a benchmark password", org_name: "bench" })
  })
  if (up.status !== 201) throw new Error(`sign-up answered ${up.status}`)
  const cookie = up.headers.get("set-cookie")!.split(";")[0]!
  const key = await fetch(`${base}/v1/auth/api-keys`, {
    method: "POST",
    headers: { "content-type": "application/json", cookie, origin: base },
    body: JSON.stringify({ name: "bench" })
  }).then(json)
  if (key.status !== 201) throw new Error(`mint answered ${key.status}`)
  return key.body
}

// `svc api` twice.
const CLI = new URL("../apps/cli/src/main.ts", import.meta.url).pathname
const startApi = async (port: number): Promise<ChildProcess> => {
  const child = spawn(process.execPath, [CLI, "api"], {
    env: {
      ...process.env,
      ...NO_RATE_LIMIT,
      DATABASE_URL: pg.url,
      NATS_URL: nats.url,
      SVC_PORT: String(port),
      SVC_HOST: "127.0.0.1"
    },
    stdio: ["ignore", "ignore", "inherit"]
  })
  await waitForPort(port, 30_000, child)
  return child
}
const children: Array<ChildProcess> = []
try {
  const [portA, portB] = [await freePort(), await freePort()]
  // One after the other: both migrate the same database at start.
  children.push(await startApi(portA))
  children.push(await startApi(portB))
  const a = `http://127.0.0.1:${portA}`
  const b = `http://127.0.0.1:${portB}`
  const root = await bootstrap(a)
  const admin = { authorization: `Bearer ${root.token}`, "content-type": "application/json" }
  // Both processes hear each other's presence within milliseconds of starting; give it a moment.
  await new Promise((r) => setTimeout(r, 500))
  const samples: Array<number> = []
  let refusedAtOnce = 0
  for (let i = 0; i < REVOCATIONS; i++) {
    const minted = await fetch(`${a}/v1/auth/api-keys`, {
      method: "POST",
      headers: admin,
      body: JSON.stringify({ name: `r${i}` })
    }).then(json)
    const auth = { authorization: `Bearer ${minted.body.token}` }
    for (let j = 0; j < 3; j++) {
      const warm = await fetch(`${b}/v1/auth/me`, { headers: auth })
      await warm.arrayBuffer()
      if (warm.status !== 200) throw new Error(`warm-up answered ${warm.status}`)
    }
    const started = performance.now()
    const revoked = await fetch(`${a}/v1/auth/api-keys/${minted.body.id}`, { method: "DELETE", headers: admin })
    await revoked.arrayBuffer()
    if (revoked.status !== 200) throw new Error(`DELETE answered ${revoked.status}`)
    for (let attempt = 0;; attempt++) {
      const res = await fetch(`${b}/v1/auth/me`, { headers: auth })
      await res.arrayBuffer()
      if (res.status === 401) {
        if (attempt === 0) refusedAtOnce++
        break
      }
      if (performance.now() - started > 5000) throw new Error("process B still accepts the key after 5 s")
    }
    samples.push(performance.now() - started)
  }
  samples.sort((x, y) => x - y)
  console.log(`Revocation propagation between two API processes (DELETE on A, until B refuses), ${REVOCATIONS} keys`)
  console.log(
    `  median ${fmt(median(samples), 2)} ms  p90 ${fmt(samples[Math.floor(samples.length * 0.9)]!, 2)} ms  max ${
      fmt(samples[samples.length - 1]!, 2)
    } ms  (target < 50 ms)`
  )
  console.log(`  B refused on the first request after DELETE returned: ${refusedAtOnce}/${REVOCATIONS}`)
  record({
    bench: "auth",
    figure: "revocation seen by a second API process, median",
    value: median(samples),
    unit: "ms",
    target: "< 50 ms",
    met: median(samples) < 50,
    runs: REVOCATIONS
  })
} finally {
  for (const child of children) child.kill("SIGTERM")
  await Promise.all(children.map((c) => new Promise((r) => (c.exitCode !== null ? r(null) : c.once("exit", r)))))
  await Promise.all([nats.stop(), pg.close()])
}
