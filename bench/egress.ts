/**
 * The egress path's cost: requests per second and latency of the same requests made by curl
 * inside a sandbox (through the firewall redirect, the native front and the proxy) and by curl
 * on the host straight to the server (the baseline, its own process, in the same run), against
 * a fake public host in a network namespace (packages/testing/src/FakePublicHost.ts):
 *
 *   HTTP                  plain HTTP, checked per request
 *   HTTPS tunnelled       SNI read, then bytes relayed untouched
 *   HTTPS with injection  TLS terminated with the platform's CA, header written, TLS upstream
 *
 * Then the native front's cost per held connection: fds, threads and RSS of the front with
 * `HELD` half-sent requests held from the sandbox (fixtures/egress-holder.c).
 *
 * Each measurement is one curl process fetching `BENCH_REQUESTS` (300) URLs in a row over one
 * kept-alive connection; latency is curl's `time_total` per request, requests per second
 * over their sum. `BENCH_RUNS` (3) rounds,
 * sandbox and host alternating; medians.
 *
 *   node bench/egress.ts
 */
import { startNats } from "@svc/local-servers/Servers"
import { API, OTHER } from "@svc/testing/FakePublicHost"
import * as TestNats from "@svc/testing/TestNats"
import { testSecretBox, useTestEncryptionKeys } from "@svc/testing/TestSecrets"
import { Effect, Layer } from "effect"
import { execFileSync } from "node:child_process"
import * as FsSync from "node:fs"
import { fileURLToPath } from "node:url"
import { World } from "../apps/agent/test/fixtures/egress-world.ts"
import { Reports } from "../apps/agent/testing/Agent.ts"
import { ensureBucket } from "../packages/bus/src/Topology.ts"
import {
  EGRESS_BUCKET_SPEC,
  sandboxEgressKey,
  secretEgressKey,
  secretValueAad
} from "../packages/host-protocol/src/Egress.ts"
import { fmt } from "./lib/Measure.ts"
import { median } from "./lib/Stats.ts"

const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 300)
const RUNS = Number(process.env.BENCH_RUNS ?? 3)
const SECRET_ID = "sec_bench"
/** Connections held (half-sent requests) to measure the front's cost per connection: below the per-sandbox cap. */
const HELD = 200

useTestEncryptionKeys()
const natsServer = await startNats()
process.env.SVC_TEST_NATS_URL = natsServer.url

interface Sample {
  readonly perSecond: number
  readonly p50: number
  readonly p99: number
}

const quantile = (values: ReadonlyArray<number>, q: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!
}

/**
 * curl's `time_total` per request → a sample; requests per second over their sum (busybox's
 * `date` has no sub-second clock inside, so both sides use curl's own clock).
 */
const sampleOf = (text: string): Sample => {
  const times = text.trim().split("\n").map((line) => Number(line.trim().replace(",", ".")) * 1000)
  if (times.length !== REQUESTS || times.some((t) => !Number.isFinite(t))) {
    throw new Error(`expected ${REQUESTS} timings, got: ${text.slice(0, 500)}`)
  }
  const total = times.reduce((a, b) => a + b, 0)
  return { perSecond: REQUESTS / (total / 1000), p50: quantile(times, 0.5), p99: quantile(times, 0.99) }
}

const curlScript = (url: string, options: string) =>
  `curl -s ${options} -w '%{time_total}\\n' ${Array(REQUESTS).fill(`-o /dev/null ${url}`).join(" ")}`

/** The three paths, the host's curl resolving the names to the fake host's address. */
const casesFor = (address: string) =>
  [
    { label: "HTTP", url: `http://${OTHER}/bench`, resolve: `${OTHER}:80:${address}` },
    { label: "HTTPS tunnelled", url: `https://${OTHER}/bench`, resolve: `${OTHER}:443:${address}` },
    { label: "HTTPS with injection", url: `https://${API}/bench`, resolve: `${API}:443:${address}` }
  ] as const

await Effect.runPromise(
  Effect.gen(function*() {
    const { address, agent, dir, sandboxId } = yield* World
    const cases = casesFor(address)
    const kv = yield* ensureBucket(EGRESS_BUCKET_SPEC)
    const sealedValue = yield* testSecretBox().seal("bench-value", secretValueAad(SECRET_ID))
    const org = "org_00000000000000000000000000"
    yield* Effect.promise(() =>
      kv.put(
        secretEgressKey(SECRET_ID),
        JSON.stringify({
          secretId: SECRET_ID,
          orgId: org,
          allowedHosts: [API],
          headerName: "Authorization",
          headerFormat: "Bearer {value}",
          sealedValue
        })
      )
    )
    yield* Effect.promise(() =>
      kv.put(
        sandboxEgressKey(sandboxId),
        JSON.stringify({ sandboxId, orgId: org, policy: { allow_out: [], deny_out: [] }, secretIds: [SECRET_ID] })
      )
    )
    yield* Effect.sleep("500 millis")

    const inSandbox = (url: string) =>
      Effect.map(
        agent.driver.exec(sandboxId, {
          cmd: ["sh", "-c", curlScript(url, "--cacert /root/fake-ca.pem")],
          timeoutMs: 300_000,
          maxOutputBytes: 4 * 1024 * 1024
        }),
        (result) => sampleOf(Buffer.from(result.stdout).toString("utf8"))
      )
    const onHost = (url: string, resolve: string) =>
      Effect.sync(() =>
        sampleOf(execFileSync("sh", ["-c", curlScript(url, `--cacert ${dir}/fake-ca.pem --resolve ${resolve}`)], {
          encoding: "utf8",
          maxBuffer: 4 * 1024 * 1024
        }))
      )

    // Warm-up: leaf certificate, keep-alive pools, JIT.
    for (const c of cases) {
      yield* inSandbox(c.url)
      yield* onHost(c.url, c.resolve)
    }
    console.log(
      `Egress path vs the host directly: ${REQUESTS} requests per curl over one connection, median of ${RUNS} runs`
    )
    console.log(
      `| path | host req/s | sandbox req/s | ratio | host p50 / p99 ms | sandbox p50 / p99 ms | added p50 ms |`
    )
    console.log(`| --- | --- | --- | --- | --- | --- | --- |`)
    for (const c of cases) {
      const host: Array<Sample> = []
      const sandbox: Array<Sample> = []
      for (let i = 0; i < RUNS; i++) {
        host.push(yield* onHost(c.url, c.resolve))
        sandbox.push(yield* inSandbox(c.url))
      }
      const m = (samples: Array<Sample>, key: keyof Sample) => median(samples.map((s) => s[key]))
      console.log(
        `| ${c.label} | ${fmt(m(host, "perSecond"))} | ${fmt(m(sandbox, "perSecond"))} | ${
          fmt(m(sandbox, "perSecond") / m(host, "perSecond"), 2)
        } | ${fmt(m(host, "p50"), 2)} / ${fmt(m(host, "p99"), 2)} | ${fmt(m(sandbox, "p50"), 2)} / ${
          fmt(m(sandbox, "p99"), 2)
        } | ${fmt(m(sandbox, "p50") - m(host, "p50"), 2)} |`
      )
    }

    // The front's cost per held connection (issue 25): N half-sent requests held from the sandbox.
    const front = FsSync.readdirSync("/proc").find((pid) => {
      try {
        const args = FsSync.readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0")
        return /\/svc-egress-front(-[0-9a-f]+)?$/.test(args[0] ?? "") &&
          args[2] === String(agent.config.egress?.tcpPort)
      } catch {
        return false
      }
    })
    const counts = () => {
      const status = FsSync.readFileSync(`/proc/${front}/status`, "utf8")
      return {
        fds: FsSync.readdirSync(`/proc/${front}/fd`).length,
        threads: Number(/Threads:\s+(\d+)/.exec(status)?.[1]),
        rssKb: Number(/VmRSS:\s+(\d+)/.exec(status)?.[1])
      }
    }
    const holder = `${dir}/egress-holder`
    execFileSync("cc", [
      "-O2",
      "-static",
      "-o",
      holder,
      fileURLToPath(new URL("../apps/agent/test/fixtures/egress-holder.c", import.meta.url))
    ])
    yield* agent.driver.writeFile(sandboxId, "/root/holder", FsSync.readFileSync(holder), 0o755)
    const before = counts()
    yield* agent.driver.exec(sandboxId, {
      cmd: [
        "sh",
        "-c",
        `/root/holder ${address} 80 ${HELD} ${OTHER} /tmp/held /tmp/trickle </dev/null >/dev/null 2>&1 &`
      ],
      timeoutMs: 10_000
    })
    let held = before
    for (let i = 0; i < 500 && held.fds < before.fds + 2 * HELD; i++) {
      yield* Effect.sleep("20 millis")
      held = counts()
    }
    console.log(
      `Front with ${HELD} held connections: ${held.threads} thread(s), ${(held.fds - before.fds) / HELD} fds and ${
        fmt(((held.rssKb - before.rssKb) * 1024) / HELD)
      } bytes of RSS per connection`
    )
  }).pipe(
    Effect.provide(World.layer.pipe(Layer.provideMerge(Reports.layer), Layer.provideMerge(TestNats.layer))),
    Effect.scoped
  )
)
await natsServer.stop()
