/**
 * What an exec costs against what the same program costs without the sandbox, piece by piece
 * (issue 27, item 4, "execs at the floor"):
 *   node bench/exec-floor.ts        (BENCH_RUNS=5 rounds of BENCH_EXECS=30 of each command)
 *
 * One `base` sandbox on the bare driver (no NATS, Postgres or actors), then, interleaved in each
 * round so that the machine's load falls on all alike, the same program (the root's busybox
 * `true`) started through the driver's own spawner (`Process.run`) in each of these ways:
 *   host          the root's binary run on the host: no isolation at all (the floor)
 *   bwrap         a bare `bwrap` with the same root read-only, a mount namespace of its own
 *   bwrap+user    the same plus a user namespace (`--unshare-user`)
 *   bwrap+all     the same plus pid, ipc, uts and net namespaces (what a sandbox has)
 *   nsenter       util-linux `nsenter` into the running sandbox's namespaces and root
 *   enter-bare    `svc-enter` into the sandbox with an allow-all seccomp filter and no cgroup
 *   enter+seccomp the same with the sandbox's real filter (its price: the filter's load and its
 *                 checks on every syscall of the command)
 *   enter+cgroups the same plus the sandbox's cgroups joined and a pids group of the exec's own
 *                 (made before, removed after): everything `driver.exec` does but decoding
 *   driver.exec   the driver's exec (`SandboxDriver.exec`), what the agent's data plane calls
 * and the overlay's price: 2000 failed path lookups in a shell loop inside the sandbox (its root
 * is an overlay) against the same loop under `bwrap+all` on the root's plain folder.
 *
 * Then the first exec after a create (one sandbox per round) against a warm one. Figures are
 * medians of each round's median, ratios against `host` (or the named baseline) of the same round.
 */
import { useTestEncryptionKeys } from "@svc/testing/TestSecrets"
import { Effect } from "effect"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { DriverExecRequest } from "../packages/host/src/Driver.ts"
import { CONTROLLERS, groupPath } from "../packages/host/src/Driver/Cgroups.ts"
import * as Confinement from "../packages/host/src/Driver/Confinement.ts"
import { run } from "../packages/host/src/Driver/Process.ts"
import { bwrapArgs, readOnlyRoot, SANDBOX_NAMESPACES, USER_NAMESPACE } from "./lib/Bwrap.ts"
import { baseSandboxSpec, bubblewrapDriver } from "./lib/Hosts.ts"
import { record } from "./lib/Report.ts"
import { median } from "./lib/Stats.ts"

const RUNS = Number(process.env["BENCH_RUNS"] ?? 5)
const EXECS = Number(process.env["BENCH_EXECS"] ?? 30)
const LOOKUPS = 2000

const startTicksOf = (pid: number): number => {
  const stat = FsSync.readFileSync(`/proc/${pid}/stat`, "utf8")
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19])
}

/** A seccomp filter of one instruction: SECCOMP_RET_ALLOW (BPF_RET | BPF_K, k = 0x7fff0000). */
const allowAll = Buffer.from([0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0x7f])

const program = Effect.gen(function*() {
  const dataDir = yield* Effect.acquireRelease(
    Effect.promise(() => Fs.mkdtemp("/tmp/svc-bench-exec-floor-")),
    (dir) => Effect.promise(() => Fs.rm(dir, { recursive: true, force: true }))
  )
  const hostId = `bench-floor-${process.pid}`
  yield* Effect.addFinalizer(() =>
    Effect.promise(async () => {
      for (const c of CONTROLLERS) await Fs.rmdir(`/sys/fs/cgroup/${c}/svc-sandboxes/${hostId}`).catch(() => undefined)
    })
  )
  const driver = yield* bubblewrapDriver({ dataDir, hostId })
  const ids: Array<string> = []
  yield* Effect.addFinalizer(() => Effect.forEach(ids, (id) => driver.destroy(id).pipe(Effect.ignore)))

  const id = "floor-0"
  ids.push(id)
  const info = yield* driver.create(baseSandboxSpec(id))
  const pid = info.pid!
  const ticks = startTicksOf(pid)
  // The driver made these files at its start; asking again returns the same paths.
  const files = yield* Effect.promise(() => Confinement.prepare(NodePath.join(dataDir, "host")))
  const allowFile = NodePath.join(dataDir, "allow.bpf")
  yield* Effect.promise(() => Fs.writeFile(allowFile, allowAll))
  const root = NodePath.join(dataDir, "templates", "base")
  if (!FsSync.existsSync(NodePath.join(root, "bin", "busybox"))) throw new Error(`no busybox in ${root}`)
  const busybox = NodePath.join(root, "bin", "busybox")
  const procs = ["memory", "cpu", "cpuacct"].map((c) =>
    NodePath.join(groupPath({ root: "/sys/fs/cgroup", hostId }, c as "memory", id), "cgroup.procs")
  ).filter((f) => FsSync.existsSync(f))
  const pidsGroup = groupPath({ root: "/sys/fs/cgroup", hostId }, "pids", id)

  const env = { PATH: "/usr/bin:/bin" }
  const enter = (argv: ReadonlyArray<string>, seccomp: string, cgroups: ReadonlyArray<string>) => [
    "--pid",
    String(pid),
    "--start-ticks",
    String(ticks),
    "--caps",
    Confinement.capabilityHex(),
    "--seccomp",
    seccomp,
    "--env-fd",
    "3",
    "--cwd",
    "/",
    ...cgroups.flatMap((f) => ["--cgroup", f]),
    "--",
    ...argv
  ]
  const fd3 = Buffer.from("PATH=/usr/bin:/bin\0")
  /** A bare bwrap of the root read-only, in `namespaces`. */
  const bare = (namespaces: ReadonlyArray<string>, argv: ReadonlyArray<string>) =>
    bwrapArgs({ namespaces, mounts: readOnlyRoot(root), argv })

  const ok = (what: string) => (r: { exitCode: number; stderr: Uint8Array }) => {
    if (r.exitCode !== 0) throw new Error(`${what}: exit ${r.exitCode}: ${Buffer.from(r.stderr).toString()}`)
  }
  const timed = (what: string, effect: Effect.Effect<{ exitCode: number; stderr: Uint8Array }, unknown>) =>
    Effect.gen(function*() {
      const t = performance.now()
      const r = yield* effect
      const took = performance.now() - t
      ok(what)(r)
      return took
    })
  const lookupLoop = `i=0; while [ $i -lt ${LOOKUPS} ]; do [ -e /usr/bin/no-such-file ]; i=$((i+1)); done`

  let execCounter = 0
  const ways: Record<string, () => Effect.Effect<number, unknown>> = {
    host: () => timed("host", run("host", busybox, ["true"], { env })),
    bwrap: () => timed("bwrap", run("bwrap", "bwrap", bare([], ["/bin/true"]), { env })),
    "bwrap+user": () => timed("bwrap+user", run("bwrap", "bwrap", bare(USER_NAMESPACE, ["/bin/true"]), { env })),
    "bwrap+all": () => timed("bwrap+all", run("bwrap", "bwrap", bare(SANDBOX_NAMESPACES, ["/bin/true"]), { env })),
    nsenter: () =>
      timed(
        "nsenter",
        run("nsenter", "nsenter", ["-t", String(pid), "-a", "-r", "-w", "/bin/true"], { env })
      ),
    "enter-bare": () =>
      timed("enter-bare", run("enter", files.enter, enter(["/bin/true"], allowFile, []), { env, fd3 })),
    "enter+seccomp": () =>
      timed("enter+seccomp", run("enter", files.enter, enter(["/bin/true"], files.seccomp, []), { env, fd3 })),
    "enter+cgroups": () =>
      Effect.gen(function*() {
        const t = performance.now()
        const dir = NodePath.join(pidsGroup, `bench-${++execCounter}`)
        FsSync.mkdirSync(dir)
        const r = yield* run(
          "enter",
          files.enter,
          enter(["/bin/true"], files.seccomp, [...procs, `${dir}/cgroup.procs`]),
          {
            env,
            fd3
          }
        )
        FsSync.rmdirSync(dir)
        const took = performance.now() - t
        ok("enter+cgroups")(r)
        return took
      }),
    "driver.exec": () =>
      Effect.gen(function*() {
        const t = performance.now()
        const r = yield* driver.exec(id, new DriverExecRequest({ cmd: ["/bin/true"] }))
        const took = performance.now() - t
        ok("driver.exec")(r)
        return took
      }),
    "lookups inside": () =>
      timed(
        "lookups inside",
        run("enter", files.enter, enter(["/bin/sh", "-c", lookupLoop], allowFile, []), { env, fd3 })
      ),
    "lookups bwrap": () =>
      timed(
        "lookups bwrap",
        run("bwrap", "bwrap", bare(SANDBOX_NAMESPACES, ["/bin/sh", "-c", lookupLoop]), { env })
      )
  }
  const names = Object.keys(ways)
  // Warm-up: page cache, JIT.
  for (const name of names) for (let i = 0; i < 3; i++) yield* ways[name]!()

  const rounds: Record<string, Array<number>> = Object.fromEntries(names.map((n) => [n, []]))
  const firsts: Array<number> = []
  for (let r = 0; r < RUNS; r++) {
    const samples: Record<string, Array<number>> = Object.fromEntries(names.map((n) => [n, []]))
    for (let i = 0; i < EXECS; i++) {
      for (const name of names) samples[name]!.push(yield* ways[name]!())
    }
    for (const name of names) rounds[name]!.push(median(samples[name]!))
    // The first exec after a create, against the warm execs of this round.
    const fresh = `floor-${r + 1}`
    ids.push(fresh)
    yield* driver.create(baseSandboxSpec(fresh))
    const t = performance.now()
    ok("first exec")(yield* driver.exec(fresh, new DriverExecRequest({ cmd: ["/bin/true"] })))
    firsts.push(performance.now() - t)
    yield* driver.destroy(fresh)
    process.stderr.write(
      `round ${r + 1}/${RUNS}: ${names.map((n) => `${n} ${median(samples[n]!).toFixed(2)}`).join(", ")}, first exec ${
        firsts.at(-1)!.toFixed(1)
      }\n`
    )
  }
  return { rounds, firsts }
})

useTestEncryptionKeys()
const { rounds, firsts } = await Effect.runPromise(Effect.scoped(program))
// The loops' own time: each way's process start (`enter-bare`, `bwrap+all`) taken out, round by round.
rounds["loop inside"] = rounds["lookups inside"]!.map((v, i) => Math.max(0.01, v - rounds["enter-bare"]![i]!))
rounds["loop bwrap"] = rounds["lookups bwrap"]!.map((v, i) => Math.max(0.01, v - rounds["bwrap+all"]![i]!))
const m = (name: string) => median(rounds[name]!)
const ratio = (name: string, base: string) => median(rounds[name]!.map((v, i) => v / rounds[base]![i]!))
console.log(
  `\n/bin/true started through the driver's spawner, ${RUNS} rounds of ${EXECS} (ms, medians of the rounds' medians)`
)
const rows: Array<[string, string, string]> = [
  ["bwrap", "host", "a bare bwrap (mount namespace) against the host"],
  ["bwrap+user", "bwrap", "the user namespace"],
  ["bwrap+all", "bwrap+user", "pid, ipc, uts and net namespaces"],
  ["nsenter", "host", "util-linux nsenter into the sandbox"],
  ["enter-bare", "nsenter", "svc-enter without seccomp or cgroups, against nsenter"],
  ["enter+seccomp", "enter-bare", "the seccomp filter"],
  ["enter+cgroups", "enter+seccomp", "the cgroup joins and the exec's pids group"],
  ["driver.exec", "enter+cgroups", "the driver's own work (decode, lookup, scope)"],
  ["driver.exec", "nsenter", "an exec against a bare nsenter exec"],
  ["driver.exec", "bwrap+all", "an exec against a bare bwrap with a sandbox's namespaces"],
  ["loop inside", "loop bwrap", `${LOOKUPS} failed lookups: the overlay root against the plain folder`]
]
for (const name of Object.keys(rounds)) console.log(`  ${name.padEnd(16)} ${m(name).toFixed(2).padStart(8)}`)
for (const [name, base, what] of rows) {
  record({
    bench: "exec-floor",
    figure: `${name} (${what})`,
    value: m(name),
    unit: "ms",
    baseline: m(base),
    baselineName: base,
    ratio: ratio(name, base),
    ...(name === "driver.exec" && base === "nsenter"
      ? { target: "ratio <= 2 (issue 27)", met: ratio(name, base) <= 2 }
      : {}),
    runs: RUNS
  })
}
const warm = m("driver.exec")
record({
  bench: "exec-floor",
  figure: "first driver.exec after create",
  value: median(firsts),
  unit: "ms",
  baseline: warm,
  baselineName: "a warm driver.exec",
  ratio: median(firsts) / warm,
  runs: RUNS
})
