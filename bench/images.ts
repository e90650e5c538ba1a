/**
 * Templates from OCI images (issue 30) against a local registry, each figure beside its floor
 * measured in the same run:
 *   node bench/images.ts          (BENCH_RUNS=3, BENCH_IMAGE_MIB=200, BENCH_STARTS=5)
 *
 * Starts a throwaway NATS and Postgres, the API and the runtime role in this process, a host
 * agent as a child process (its CPU read from /proc; warm pool off) and Debian's
 * `docker-registry` on loopback with TLS (@svc/testing/TestRegistry, named
 * `bench.registry.test`, resolved through SVC_REGISTRY_HOSTS_FILE, its CA trusted, loopback
 * allowed). Each run pushes a fresh image of about BENCH_IMAGE_MIB MiB (three base layers and an
 * app layer of 1 MiB files, half random and half text, so gzip halves them as it does real
 * images; new random bytes each run, so nothing is cached) and a second image on the same base
 * layers with an app layer of its own, then measures:
 *   (a) the floor: `skopeo copy docker://… oci:<dir>` + `umoci unpack` of the image from the same
 *       registry (wall and CPU time of both); the platform: POST /v1/templates {image} → `ready`
 *       (the pull, digest checks, unpacking, conversion to platform layers and their upload to
 *       the layer store), the agent's own figure (its log's `ready in`) and CPU; then the first
 *       sandbox's create → running; then the second image's pull, its log counting the layers
 *       pulled and taken from the layer cache (the shared base pulled once);
 *   (b) create → running of the image's template once its layers are on the host, against
 *       `base`, BENCH_STARTS each, alternating.
 * Floor and platform alternate which goes first from run to run (the registry's files in the page
 * cache favour the second). Medians of the runs. Deletes what it made. `BENCH_CPU_PROF=<dir>`
 * profiles the agent (`node --cpu-prof`).
 */
import * as TestNats from "@svc/testing/TestNats"
import { startTestRegistry, type TestRegistry, writeOciLayout } from "@svc/testing/TestRegistry"
import { Effect } from "effect"
import { execFile, execFileSync } from "node:child_process"
import { randomBytes } from "node:crypto"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as Os from "node:os"
import * as Path from "node:path"
import { promisify } from "node:util"
import { TEST_IMAGE_CACHE_DIR } from "../packages/testing/src/ImageCache.ts"
import { removeAtEnd, serveApi } from "./lib/Api.ts"
import { agentEnv, benchHost, startAgent, UNBOUNDED_HOST } from "./lib/Hosts.ts"
import { runInProcess } from "./lib/InProcess.ts"
import { processCpuMs } from "./lib/Measure.ts"
import { record } from "./lib/Report.ts"
import { timeToRunning } from "./lib/Sandboxes.ts"
import { median } from "./lib/Stats.ts"

const RUNS = Number(process.env["BENCH_RUNS"] ?? 3)
const IMAGE_MIB = Number(process.env["BENCH_IMAGE_MIB"] ?? 200)
const STARTS = Number(process.env["BENCH_STARTS"] ?? 5)
const MIB = 1024 * 1024
const TICK_MS = 1000 / Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim())
const run = promisify(execFile)

/** CPU ms of a process and of the children it reaped. */
const cpuMs = (pid: number) => {
  const { own, reaped } = processCpuMs(pid)
  return own + reaped
}

/** A layer of `mib` files of 1 MiB: half random, half a repeated line (gzip halves it). */
const layer = (label: string, mib: number) => {
  const text = Buffer.alloc(MIB / 2, `${label}: a line of text as configuration files and scripts have\n`)
  const files: Record<string, Uint8Array | null> = { [`opt/${label}/`]: null }
  for (let i = 0; i < mib; i++) files[`opt/${label}/f${i}.bin`] = Buffer.concat([randomBytes(MIB / 2), text])
  return { files }
}

/** Pushes `layers` as `repository:1`; the OCI layout is removed after. */
const pushImage = (registry: TestRegistry, repository: string, layers: ReadonlyArray<ReturnType<typeof layer>>) =>
  Effect.gen(function*() {
    const dir = yield* Effect.promise(() => Fs.mkdtemp(Path.join(Os.tmpdir(), "svc-bench-oci-")))
    writeOciLayout(dir, "1", { layers, config: { Env: ["PATH=/usr/local/bin:/usr/bin:/bin"] } })
    yield* registry.push(dir, "1", `${repository}:1`)
    const blobs = yield* Effect.promise(() => Fs.readdir(Path.join(dir, "blobs", "sha256")))
    let compressed = 0
    for (const b of blobs) compressed += FsSync.statSync(Path.join(dir, "blobs", "sha256", b)).size
    yield* Effect.promise(() => Fs.rm(dir, { recursive: true, force: true }))
    return compressed
  })

const platform = Effect.gen(function*() {
  const server = yield* TestNats.TestNatsServer
  const { call } = yield* serveApi()

  const registry = yield* startTestRegistry({ name: "bench.registry.test" })
  const work = yield* Effect.acquireRelease(
    Effect.promise(() => Fs.mkdtemp(Path.join(Os.tmpdir(), "svc-bench-images-"))),
    (dir) => Effect.promise(() => Fs.rm(dir, { recursive: true, force: true }))
  )
  const hostsFile = Path.join(work, "hosts")
  FsSync.writeFileSync(hostsFile, "127.0.0.1 bench.registry.test\n")
  // skopeo's --src-cert-dir takes CAs as *.crt: the floor verifies TLS as the agent does.
  const certDir = Path.join(work, "certs")
  FsSync.mkdirSync(certDir)
  FsSync.copyFileSync(registry.certificates.caFile, Path.join(certDir, "ca.crt"))

  const host = yield* benchHost("/tmp/svc-bench-images-host-")
  const prof = process.env["BENCH_CPU_PROF"]
  const agent = yield* startAgent(
    {
      ...agentEnv(server, host),
      ...UNBOUNDED_HOST,
      SVC_AGENT_POOL_SIZE: "0",
      SVC_IMAGE_CACHE_DIR: TEST_IMAGE_CACHE_DIR,
      SVC_REGISTRY_HOSTS_FILE: hostsFile,
      SVC_REGISTRY_CA_FILE: registry.certificates.caFile,
      SVC_REGISTRY_ALLOWED_SUBNETS: "127.0.0.0/8"
    },
    prof ? ["--cpu-prof", `--cpu-prof-dir=${prof}`] : []
  )

  const templates: Array<string> = []
  const sandboxes: Array<string> = []
  yield* removeAtEnd(call, { sandboxes, templates })

  /** POST /v1/templates {image} → ready: API ms, the agent's `ready in`, its CPU, the log. */
  const pull = (name: string, image: string) =>
    Effect.gen(function*() {
      const cpu0 = cpuMs(agent.pid)
      const t0 = performance.now()
      const made = yield* call("POST", "/v1/templates", { name, image })
      if (made.status !== 202) throw new Error(`template: ${made.status} ${made.text}`)
      templates.push(made.json.id)
      for (;;) {
        const got = yield* call("GET", `/v1/templates/${made.json.id}`)
        if (got.json.state === "ready") break
        if (got.json.state === "failed") throw new Error(`pull failed: ${got.json.errorMessage}`)
        yield* Effect.sleep("50 millis")
      }
      const ms = performance.now() - t0
      const cpu = cpuMs(agent.pid) - cpu0
      const log = (yield* call("GET", `/v1/templates/${made.json.id}/logs`)).text
      const onHost = Number(/ready in ([\d.]+) s/.exec(log)?.[1] ?? Number.NaN) * 1000
      return {
        id: made.json.id as string,
        ms,
        onHost,
        cpu,
        pulled: [...log.matchAll(/^.*layer \d+\/\d+ \S+ pulled/gm)].length,
        cached: [...log.matchAll(/^.*layer \d+\/\d+ \S+ cached/gm)].length
      }
    })

  /** `skopeo copy` + `umoci unpack` of `repository:1`: wall and CPU ms. */
  const floor = (repository: string) =>
    Effect.promise(async () => {
      const dir = await Fs.mkdtemp(Path.join(work, "floor-"))
      const script = [
        `skopeo copy --quiet --src-cert-dir ${certDir} docker://localhost:${registry.port}/${repository}:1 oci:${dir}/oci:1`,
        `umoci unpack --image ${dir}/oci:1 ${dir}/bundle >/dev/null`,
        // The shell's children's CPU, both reaped by now.
        "cat /proc/$$/stat"
      ].join(" && ")
      const t0 = performance.now()
      const { stdout } = await run("sh", ["-c", script], { env: { ...process.env, HOME: work }, maxBuffer: 16 * MIB })
      const ms = performance.now() - t0
      const fields = stdout.slice(stdout.lastIndexOf(")") + 2).split(" ")
      const cpu = (Number(fields[13]) + Number(fields[14])) * TICK_MS
      await Fs.rm(dir, { recursive: true, force: true })
      return { ms, cpu }
    })

  const start = (template: string) => timeToRunning(call, { template, ram_mb: 128 }, sandboxes)

  const baseMib = Math.round(IMAGE_MIB * 0.85)
  const split = [Math.round(baseMib * 0.5), Math.round(baseMib * 0.3)]
  const sizes = [split[0]!, split[1]!, baseMib - split[0]! - split[1]!, IMAGE_MIB - baseMib]
  const rows: Array<Record<string, number>> = []
  let compressed = 0
  let lastTemplate = ""
  for (let i = 0; i < RUNS; i++) {
    const tag = `${i}-${randomBytes(3).toString("hex")}`
    const baseLayers = sizes.slice(0, 3).map((mib, n) => layer(`base${n}-${tag}`, mib))
    compressed = yield* pushImage(registry, `bench/first-${tag}`, [...baseLayers, layer(`app-${tag}`, sizes[3]!)])
    yield* pushImage(registry, `bench/second-${tag}`, [...baseLayers, layer(`other-${tag}`, 10)])
    const image = `bench.registry.test:${registry.port}/bench/first-${tag}:1`
    let floorRun: { ms: number; cpu: number } | undefined
    if (i % 2 === 0) floorRun = yield* floor(`bench/first-${tag}`)
    const first = yield* pull(`first-${tag}`, image)
    if (i % 2 === 1) floorRun = yield* floor(`bench/first-${tag}`)
    const sandbox = yield* start(first.id)
    const second = yield* pull(`second-${tag}`, `bench.registry.test:${registry.port}/bench/second-${tag}:1`)
    lastTemplate = first.id
    rows.push({
      floorMs: floorRun!.ms,
      floorCpu: floorRun!.cpu,
      pullMs: first.ms,
      pullOnHost: first.onHost,
      pullCpu: first.cpu,
      firstSandbox: sandbox,
      secondMs: second.ms,
      secondPulled: second.pulled,
      secondCached: second.cached
    })
    console.error(`run ${i + 1}/${RUNS}: ${JSON.stringify(rows.at(-1))}`)
  }

  // (b) create → running with the layers on the host, against base; one of each first.
  yield* start("base")
  yield* start(lastTemplate)
  const startsBase: Array<number> = []
  const startsImage: Array<number> = []
  for (let i = 0; i < STARTS; i++) {
    startsBase.push(yield* start("base"))
    startsImage.push(yield* start(lastTemplate))
  }
  return { rows, compressed, sizes, startsBase, startsImage }
})

const result = await runInProcess(platform)
const commit = execFileSync("git", ["rev-parse", "--short", "HEAD"], { encoding: "utf8" }).trim()
const of = (k: string) => median(result.rows.map((r) => r[k]!))
console.log(
  `\nimages (${Os.cpus().length} cores, kernel ${Os.release()}, commit ${commit}, load average ${
    Os.loadavg().map((l) => l.toFixed(1)).join(" ")
  })`
)
console.log(
  `an image of ${result.sizes.reduce((a, b) => a + b, 0)} MiB in ${result.sizes.length} layers (${
    result.sizes.join(" + ")
  } MiB; ${Math.round(result.compressed / MIB)} MiB compressed); medians of ${RUNS} runs`
)
const floorMs = of("floorMs")
record({
  bench: "images",
  figure: "fresh image: POST /v1/templates → ready (pull + unpack + layer store)",
  value: of("pullMs"),
  unit: "ms",
  baseline: floorMs,
  baselineName: "skopeo copy + umoci unpack",
  ratio: of("pullMs") / floorMs,
  target: "ratio <= 1.5",
  met: of("pullMs") / floorMs <= 1.5,
  runs: RUNS
})
record({
  bench: "images",
  figure: "fresh image: the agent's own figure (log's `ready in`)",
  value: of("pullOnHost"),
  unit: "ms",
  baseline: floorMs,
  baselineName: "skopeo copy + umoci unpack",
  ratio: of("pullOnHost") / floorMs,
  runs: RUNS
})
record({
  bench: "images",
  figure: "fresh image: CPU of the agent during the pull",
  value: of("pullCpu"),
  unit: "ms",
  baseline: of("floorCpu"),
  baselineName: "CPU of skopeo + umoci",
  ratio: of("pullCpu") / of("floorCpu"),
  runs: RUNS
})
record({
  bench: "images",
  figure: "first sandbox of the fresh image: create → running",
  value: of("firstSandbox"),
  unit: "ms",
  runs: RUNS
})
record({
  bench: "images",
  figure: `second image on the same base: POST → ready (layers pulled ${of("secondPulled")}, from the layer cache ${
    of("secondCached")
  })`,
  value: of("secondMs"),
  unit: "ms",
  runs: RUNS
})
const base = median(result.startsBase)
const image = median(result.startsImage)
record({
  bench: "images",
  figure: "create → running, image template with its layers on the host",
  value: image,
  unit: "ms",
  baseline: base,
  baselineName: "base",
  ratio: image / base,
  target: "ratio <= 1.5",
  met: image / base <= 1.5,
  runs: STARTS
})
console.log(JSON.stringify({ rows: result.rows, startsBase: result.startsBase, startsImage: result.startsImage }))
