/**
 * `svc`'s start against a bare `node -e 0` in the same run: `svc --help` and one client command
 * (`svc whoami --json`, answered by a real API role), both as the installable `svc` (the bundle
 * `npm run cli:pack` packs, built here first) and as the repository's (`apps/cli/src/main.ts` on
 * the workspace's sources, with the compile cache `bin/svc` gives it). The subjects take turns,
 * run by run; each figure is the median wall time (and CPU time, user + system, of the process)
 * of `BENCH_CLI_RUNS` (15) runs, after one discarded run that warms the compile cache. Target: the
 * installable `svc --help` within 3x of `node -e 0`. The floor: `effect`'s CLI with one empty
 * command on the same platform services, bundled the same way (lib/cli-floor.ts), whose `--help`
 * is what the framework costs before a command of ours. `BENCH_API_ROOT=<checkout>` runs the
 * repository's svc (and the API) of another checkout, for before/after figures.
 *   npm run bench cli     (or: node bench/cli.ts)
 */
import { startNats, startPostgres } from "@svc/local-servers/Servers"
import { useTestEncryptionKeys } from "@svc/testing/TestSecrets"
import { execFileSync, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { bundle } from "../apps/cli/scripts/build.ts"
import { apiMain, cliMain, mintKey, type Role, startRole, stopRoles } from "./lib/ApiRole.ts"
import { fmt } from "./lib/Measure.ts"
import { record } from "./lib/Report.ts"
import { median } from "./lib/Stats.ts"

const RUNS = Number(process.env.BENCH_CLI_RUNS ?? 15)
const root = new URL("..", import.meta.url).pathname
const packed = path.join(root, "apps/cli/dist/svc.mjs")
/** GNU time (Debian's `time`): the child's CPU time, which Node does not report for a child. */
const TIME = "/usr/bin/time"

interface Sample {
  readonly wallMs: number
  readonly cpuMs: number
}

interface Subject {
  readonly name: string
  readonly args: ReadonlyArray<string>
  readonly env?: Record<string, string>
  readonly samples: Array<Sample>
}

/** One run of `node args...`: its wall time, and its CPU time read by GNU time. */
const runOnce = (args: ReadonlyArray<string>, env: Record<string, string>): Sample => {
  const started = performance.now()
  const result = spawnSync(TIME, ["-f", "%U %S", process.execPath, ...args], {
    env: { ...process.env, ...env },
    encoding: "utf8"
  })
  const wallMs = performance.now() - started
  if (result.status !== 0) throw new Error(`node ${args.join(" ")} exited ${result.status}: ${result.stderr}`)
  const [user, system] = result.stderr.trim().split("\n").at(-1)!.split(" ").map(Number)
  return { wallMs, cpuMs: (user! + system!) * 1000 }
}

execFileSync(process.execPath, [path.join(root, "apps/cli/scripts/build.ts")], { stdio: "inherit" })
// The state dir of the run (no dev credentials are read from it), and the floor's bundle.
const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), "svc-bench-cli-"))
const floor = path.join(stateDir, "floor.mjs")
await bundle(path.join(root, "bench/lib/cli-floor.ts"), floor)
const [nats, pg] = await Promise.all([startNats(), startPostgres()])
useTestEncryptionKeys()
const roles: Array<Role> = []
try {
  roles.push(await startRole([apiMain()], { DATABASE_URL: pg.url, NATS_URL: nats.url }))
  const env = { SVC_API_URL: roles[0]!.url, SVC_API_KEY: await mintKey(roles[0]!.url), SVC_STATE_DIR: stateDir }
  // As bin/svc runs it: with V8's compile cache in the state dir (the installable svc turns its own
  // on); the floor too.
  const repository = { NODE_COMPILE_CACHE: path.join(stateDir, "compile-cache") }
  const subjects: ReadonlyArray<Subject> = [
    { name: "node -e 0", args: ["-e", "0"], samples: [] },
    { name: "effect/cli floor: an empty command's --help", args: [floor, "--help"], env: repository, samples: [] },
    { name: "svc --help (installable)", args: [packed, "--help"], samples: [] },
    { name: "svc whoami --json (installable)", args: [packed, "whoami", "--json"], samples: [] },
    { name: "svc --help (repository)", args: [cliMain(), "--help"], env: repository, samples: [] },
    { name: "svc whoami --json (repository)", args: [cliMain(), "whoami", "--json"], env: repository, samples: [] }
  ]
  for (const subject of subjects) runOnce(subject.args, { ...env, ...subject.env })
  for (let run = 0; run < RUNS; run++) {
    for (const subject of subjects) subject.samples.push(runOnce(subject.args, { ...env, ...subject.env }))
  }
  const [baseline, ...rest] = subjects.map((s) => ({
    name: s.name,
    wall: median(s.samples.map((x) => x.wallMs)),
    cpu: median(s.samples.map((x) => x.cpuMs))
  }))
  console.log(`svc's start against node -e 0, median of ${RUNS} runs each (turns taken run by run)`)
  console.log(`  ${baseline!.name}: ${fmt(baseline!.wall, 1)} ms wall, ${fmt(baseline!.cpu, 0)} ms CPU`)
  for (const subject of rest) {
    const ratio = subject.wall / baseline!.wall
    console.log(
      `  ${subject.name}: ${fmt(subject.wall, 1)} ms wall (${fmt(ratio, 2)}x), ${fmt(subject.cpu, 0)} ms CPU (${
        fmt(subject.cpu / Math.max(baseline!.cpu, 1), 1)
      }x)`
    )
    const target = subject.name === "svc --help (installable)"
    record({
      bench: "cli",
      figure: `${subject.name}, wall`,
      value: subject.wall,
      unit: "ms",
      baseline: baseline!.wall,
      baselineName: "node -e 0",
      ratio,
      ...(target ? { target: "ratio <= 3", met: ratio <= 3 } : {}),
      runs: RUNS
    })
  }
} finally {
  await stopRoles(roles)
  await Promise.all([nats.stop(), pg.close()])
  fs.rmSync(stateDir, { recursive: true, force: true })
}
