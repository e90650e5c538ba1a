/**
 * Templates through the whole platform: build times and create → running of template sandboxes.
 *   node bench/templates.ts        (BENCH_STARTS=10)
 *
 * Starts a throwaway NATS and Postgres, the API and the runtime role in this process and a host
 * agent as a child process (warm pool off: every start is a cold boot, so `base` and `debian`
 * compare like with like; the `debian` archive from the repository's image cache,
 * `.svc/cache/images`, built there once when absent), then measures:
 *   - build time (POST /v1/templates → `ready`, read every 50 ms; and the agent's own figure, the
 *     log's `ready in`: the API applies a build's end on a 1 s loop) of one three-step template
 *     (`file`, `env`, `run`) on `base` and on `debian`: first (on `debian` the first build also
 *     extracts the debian root on this fresh host), first again (new step contents, the root
 *     there), and cached (the same steps again: every step from the layer cache);
 *   - the first start of the template on a second host that never pulled it, and the next one;
 *   - create → running (POST /v1/sandboxes → state `running`, read every 10 ms), BENCH_STARTS in
 *     a row each, for `base`, `debian` and the three-step template on `debian`.
 * Deletes everything it made before it exits.
 */
import * as TestNats from "@svc/testing/TestNats"
import { Effect } from "effect"
import { execFileSync } from "node:child_process"
import { randomBytes } from "node:crypto"
import * as Os from "node:os"
import { TEST_IMAGE_CACHE_DIR } from "../packages/testing/src/ImageCache.ts"
import { removeAtEnd, serveApi } from "./lib/Api.ts"
import { agentEnv, benchHost, startAgent, UNBOUNDED_HOST } from "./lib/Hosts.ts"
import { runInProcess } from "./lib/InProcess.ts"
import { timeToRunning } from "./lib/Sandboxes.ts"
import { quantile } from "./lib/Stats.ts"

const STARTS = Number(process.env["BENCH_STARTS"] ?? 10)

const ms = (n: number) => n.toFixed(0).padStart(9)

const platform = Effect.gen(function*() {
  const server = yield* TestNats.TestNatsServer
  const { base, call, key } = yield* serveApi()

  /** An agent of `region` as a child process, with a data folder of its own; cleaned up at the end. */
  const startAgentOf = (region: string) =>
    Effect.gen(function*() {
      const host = yield* benchHost("/tmp/svc-bench-templates-")
      yield* startAgent({
        ...agentEnv(server, host, region),
        ...UNBOUNDED_HOST,
        SVC_AGENT_POOL_SIZE: "0",
        SVC_IMAGE_CACHE_DIR: TEST_IMAGE_CACHE_DIR
      })
    })
  yield* startAgentOf("local")

  const templates: Array<string> = []
  const sandboxes: Array<string> = []
  yield* removeAtEnd(call, { sandboxes, templates })

  /** POST → ready, in ms; the steps with `nonce` in them (new contents: no cache hit). */
  const build = (name: string, root: string, nonce: string) =>
    Effect.gen(function*() {
      const t0 = performance.now()
      const made = yield* call("POST", "/v1/templates", {
        name,
        base: root,
        steps: [
          { file: { path: "/srv/app/config", content: `nonce=${nonce}\n` } },
          { env: { APP_NONCE: nonce } },
          { run: "mkdir -p /srv/app/data && echo \"$APP_NONCE\" > /srv/app/data/built && ls / > /srv/app/data/ls" }
        ]
      })
      if (made.status !== 202) throw new Error(`build: ${made.status} ${JSON.stringify(made.json)}`)
      templates.push(made.json.id)
      for (;;) {
        const got = yield* call("GET", `/v1/templates/${made.json.id}`)
        if (got.json.state === "ready") {
          const total = performance.now() - t0
          // The agent's own figure (its log's last line): the API applies a build's end on a 1 s loop.
          const log = yield* Effect.promise(() =>
            fetch(`${base}/v1/templates/${made.json.id}/logs`, { headers: { authorization: `Bearer ${key}` } })
              .then((r) => r.text())
          )
          const onHost = Number(/ready in ([\d.]+) s/.exec(log)?.[1] ?? Number.NaN) * 1000
          return { id: made.json.id as string, ms: total, onHost }
        }
        if (got.json.state === "failed") throw new Error(`build failed: ${got.json.errorMessage}`)
        yield* Effect.sleep("50 millis")
      }
    })

  const start = (template: string, region = "local") =>
    timeToRunning(call, { template, ram_mb: 128, region }, sandboxes)

  const tag = randomBytes(4).toString("hex")
  const builds: Array<readonly [string, number, number]> = []
  for (const root of ["base", "debian"]) {
    const first = yield* build(`${root}-first-${tag}`, root, `${tag}-1`)
    builds.push([
      `${root}: first${root === "debian" ? " (the debian root extracted too)" : ""}`,
      first.ms,
      first.onHost
    ])
    const again = yield* build(`${root}-again-${tag}`, root, `${tag}-2`)
    builds.push([`${root}: first again (new step contents)`, again.ms, again.onHost])
    const cached = yield* build(`${root}-cached-${tag}`, root, `${tag}-1`)
    builds.push([`${root}: cached (every step from the layer cache)`, cached.ms, cached.onHost])
  }
  const app = templates[3]!

  // One of each first (JIT, a first boot of each image), then in a row.
  for (const template of ["base", "debian", app]) yield* start(template)
  const starts: Record<string, Array<number>> = { base: [], debian: [], "three steps on debian": [] }
  for (let i = 0; i < STARTS; i++) {
    starts["base"]!.push(yield* start("base"))
    starts["debian"]!.push(yield* start("debian"))
    starts["three steps on debian"]!.push(yield* start(app))
  }
  // A host that has never pulled the image: its first start pulls and checks the template's
  // layers from the store (and extracts the debian root its own); then a start with them there.
  yield* startAgentOf("fresh")
  const firstPull = yield* start(app, "fresh")
  const afterPull = yield* start(app, "fresh")
  return { builds, starts, firstPull, afterPull }
})

const result = await runInProcess(platform)
const commit = execFileSync("git", ["rev-parse", "--short", "HEAD"], { encoding: "utf8" }).trim()
console.log(`\ntemplates (${Os.cpus().length} cores, kernel ${Os.release()}, commit ${commit})`)
console.log(
  `\nbuild of a three-step template (file, env, run)${"".padStart(16)}${"API ms".padStart(9)}${"host ms".padStart(9)}`
)
for (const [name, value, onHost] of result.builds) console.log(`  ${name.padEnd(62)}${ms(value)}${ms(onHost)}`)
console.log(`\ncreate → running, ${STARTS} in a row each (cold boots)${"p50 ms".padStart(17)}${"max ms".padStart(9)}`)
for (const [name, values] of Object.entries(result.starts)) {
  console.log(`  ${name.padEnd(62)}${ms(quantile(values, 0.5))}${ms(Math.max(...values))}`)
}
const ratio = quantile(result.starts["debian"]!, 0.5) / quantile(result.starts["base"]!, 0.5)
console.log(`  ${"debian / base (p50)".padEnd(62)}${ratio.toFixed(2).padStart(9)}`)
console.log(`\nthe three-step template on a host that never had it${"ms".padStart(19)}`)
console.log(`  ${"first start (pulls the layers, extracts the debian root)".padEnd(62)}${ms(result.firstPull)}`)
console.log(`  ${"the next start there".padEnd(62)}${ms(result.afterPull)}`)
