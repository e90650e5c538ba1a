/**
 * The namespaces driver: each sandbox is a bubblewrap process tree with its own user, pid,
 * mount, uts, ipc and net namespaces over a copy-on-write root file system, limited by cgroup v1
 * groups and attached to a host bridge through a veth pair. Sandboxes are detached from the
 * agent (own session, no die-with-parent): a restarted agent finds them again via `list`.
 */
import { Effect, Layer, Schema, Semaphore } from "effect"
import { spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import {
  DEFAULT_MAX_OUTPUT_BYTES,
  DirEntry,
  DriverFailure,
  DriverUnsupported,
  type EntryType,
  ExecRequest,
  ExecResult,
  FileMode,
  FileStat,
  InvalidSandboxRequest,
  MAX_FILE_BYTES,
  SandboxAlreadyExists,
  SandboxCapacityExhausted,
  SandboxDriver,
  SandboxFileError,
  SandboxId,
  SandboxInfo,
  SandboxListing,
  SandboxNotFound,
  SandboxNotRunning,
  SandboxPath,
  SandboxSpec,
  SandboxStats,
  TemplateNotFound
} from "../Driver.ts"
import { BASE_TEMPLATE, ensureBaseTemplate } from "../Rootfs.ts"
import * as Cgroups from "./Cgroups.ts"
import { DriverConfig } from "./Config.ts"
import * as Network from "./Network.ts"
import { decode, run, runChecked, type RunOptions } from "./Process.ts"
import {
  isAlive,
  procStat,
  readRunRecord,
  readSandboxRecord,
  RunRecord,
  SandboxRecord,
  type SandboxPaths,
  sandboxPaths,
  writeRunRecord,
  writeSandboxRecord
} from "./State.ts"

/**
 * Where the host's static busybox appears inside every sandbox. The folder itself is a read-only
 * bind mount: a mount point cannot be renamed or replaced from inside, so root in the sandbox
 * cannot swap the helper the agent runs on its next exec.
 */
const HELPER_DIR = "/dev/.svc"
const HELPER = `${HELPER_DIR}/busybox`

/** Host commands run with this environment only: nothing of the caller's leaks in. */
const HOST_ENV = { PATH: "/usr/sbin:/usr/bin:/sbin:/bin" }

const SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/**
 * Runs inside a fresh private mount namespace (made by `unshare`): joins the sandbox's cgroups,
 * mounts the overlay where only this namespace sees it, then becomes bubblewrap.
 * Arguments: <cgroup.procs files...> -- <lower> <upper> <work> <merged> <bwrap> <bwrap args...>
 */
const START_SCRIPT = `
while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift
mount -t overlay overlay -o "lowerdir=$1,upperdir=$2,workdir=$3" "$4" || exit 124
shift 4
exec "$@"
`

/** Joins the given cgroups, then becomes the rest of the command line. */
const JOIN_SCRIPT = `
while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift
exec "$@"
`

/** Inside the sandbox: change to the requested folder, then become the command. */
const CWD_SCRIPT = `cd -- "$0" || exit 126; exec -- "$@"`

/** The sandbox's init command (pid 2; bubblewrap is pid 1 and reaps orphans). */
const INIT_SCRIPT = `echo ready >&4; exec 3>&- 4>&-; exec ${HELPER} sleep inf`

// File API scripts, run with busybox sh inside the sandbox where `/` is the sandbox root: links
// and `..` resolve within it, never to the host. Exit codes name the refusal.
const FILE_EXIT: Record<number, SandboxFileError["reason"]> = {
  3: "not_found",
  4: "is_directory",
  5: "not_regular_file",
  6: "too_large",
  7: "not_directory"
}

const READ_SCRIPT = `
B=${HELPER}
p=$1
[ -e "$p" ] || exit 3
[ -d "$p" ] && exit 4
[ -f "$p" ] || exit 5
exec "$B" head -c "$2" -- "$p"
`

const WRITE_SCRIPT = `
B=${HELPER}
p=$1
case "$p" in */) exit 4;; esac
d=\${p%/*}
[ -z "$d" ] && d=/
[ -d "$p" ] && exit 4
if [ ! -d "$d" ]; then
  [ -e "$d" ] && exit 7
  "$B" mkdir -p -- "$d" 2>/dev/null || exit 7
fi
"$B" cat > "$p" || exit 1
"$B" chmod "$2" "$p"
`

const STAT_SCRIPT = `
B=${HELPER}
p=$1
[ -e "$p" ] || [ -L "$p" ] || exit 3
"$B" stat -c '%f %s %Y' -- "$p"
`

/** One record per entry: "<hex mode> <size> <mtime> <name>\\0" (names may hold newlines). */
const LIST_SCRIPT = `
B=${HELPER}
p=$1
[ -d "$p" ] || { [ -e "$p" ] && exit 7; exit 3; }
cd -- "$p" || exit 1
n=0
for f in .* *; do
  [ "$f" = . ] || [ "$f" = .. ] && continue
  [ -e "$f" ] || [ -L "$f" ] || continue
  s=$("$B" stat -c '%f %s %Y' -- "$f") || continue
  printf '%s %s\\0' "$s" "$f"
  n=$((n+1))
  [ $n -ge ${10_000} ] && break
done
exit 0
`

const FILE_OP_TIMEOUT_MS = 60_000

const typeOfMode = (mode: number): EntryType => {
  switch (mode & 0o170000) {
    case 0o100000:
      return "file"
    case 0o040000:
      return "dir"
    case 0o120000:
      return "symlink"
    default:
      return "other"
  }
}

/** Parses "<hex mode> <size> <mtime seconds>". */
const parseStatLine = (line: string): { type: EntryType; size: number; mtime: string } | undefined => {
  const match = /^([0-9a-f]+) (\d+) (-?\d+)$/.exec(line.trim())
  if (!match) return undefined
  return {
    type: typeOfMode(parseInt(match[1]!, 16)),
    size: Number(match[2]),
    mtime: new Date(Number(match[3]) * 1000).toISOString()
  }
}

const errorMessage = (e: unknown) => (e instanceof Error ? e.message : String(e))

const attempt = <A>(operation: string, f: () => Promise<A>): Effect.Effect<A, DriverFailure> =>
  Effect.tryPromise({ try: f, catch: (e) => new DriverFailure({ operation, message: errorMessage(e) }) })

const findBinary = (name: string): string | undefined =>
  ["/usr/bin", "/usr/sbin", "/bin", "/sbin"].map((dir) => NodePath.join(dir, name)).find((path) => FsSync.existsSync(path))

const invalid = (message: string) => new InvalidSandboxRequest({ message })

const decodeInput = <S extends Schema.Top>(schema: S, input: unknown) =>
  Schema.decodeUnknownEffect(schema)(input).pipe(
    Effect.mapError((issue) => invalid(String(issue.message ?? issue)))
  ) as Effect.Effect<S["Type"], InvalidSandboxRequest>

const checkId = (sandboxId: unknown) => decodeInput(SandboxId, sandboxId)
const checkPath = (path: unknown) => decodeInput(SandboxPath, path)

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

export class BubblewrapDriver {
  /** The namespaces driver. Needs `DriverConfig`; builds the base template and the bridge at start. */
  static readonly layer = Layer.effect(
    SandboxDriver,
    Effect.gen(function*() {
      const config = yield* DriverConfig
      const bin = {
        bwrap: findBinary("bwrap"),
        unshare: findBinary("unshare"),
        nsenter: findBinary("nsenter"),
        ip: findBinary("ip"),
        sh: findBinary("sh")
      }
      for (const [name, path] of Object.entries(bin)) {
        if (path === undefined) {
          return yield* new DriverFailure({ operation: "init", message: `${name} is not installed` })
        }
      }
      const bwrap = bin.bwrap!, unshare = bin.unshare!, nsenter = bin.nsenter!, ip = bin.ip!, sh = bin.sh!
      if (/[,:\s]/.test(config.dataDir)) {
        return yield* new DriverFailure({ operation: "init", message: "dataDir must not contain ',', ':' or spaces (overlay options)" })
      }
      const subnet = Network.parseSubnet(config.subnet)
      const cgroups: Cgroups.CgroupSettings = { root: config.cgroupRoot, hostId: config.hostId }
      const templatesDir = NodePath.join(config.dataDir, "templates")
      const sandboxesDir = NodePath.join(config.dataDir, "sandboxes")

      yield* attempt("init", () => Fs.mkdir(sandboxesDir, { recursive: true }))
      const helperDir = NodePath.join(config.dataDir, "helper")
      yield* attempt("init", async () => {
        await Fs.mkdir(helperDir, { recursive: true, mode: 0o755 })
        const target = NodePath.join(helperDir, "busybox")
        const [have, want] = await Promise.all([Fs.stat(target).catch(() => undefined), Fs.stat(config.busybox)])
        if (have === undefined || have.size !== want.size || have.mtimeMs < want.mtimeMs) {
          const temp = `${target}.tmp-${process.pid}`
          await Fs.copyFile(config.busybox, temp)
          await Fs.chmod(temp, 0o755)
          await Fs.rename(temp, target)
        }
      })
      const baseDir = yield* attempt("init", () => ensureBaseTemplate(templatesDir, config.busybox))

      // The bridge is shared by every agent on the machine: create it if absent, never touch others.
      const ensureBridge = Effect.gen(function*() {
        if (!(yield* attempt("bridge", () => Network.interfaceExists(config.bridge)))) {
          const made = yield* run("bridge", ip, ["link", "add", "name", config.bridge, "type", "bridge"], { env: HOST_ENV, timeoutMs: 10_000 })
          if (made.exitCode !== 0 && !/exists/i.test(decode(made.stderr))) {
            return yield* new DriverFailure({ operation: "bridge", message: decode(made.stderr) })
          }
        }
        yield* runChecked("bridge", ip, ["addr", "replace", `${subnet.gateway}/${subnet.prefix}`, "dev", config.bridge], { env: HOST_ENV })
        yield* runChecked("bridge", ip, ["link", "set", config.bridge, "up"], { env: HOST_ENV })
        // Drop packets whose source could not be reached back through the bridge (spoofing).
        yield* attempt("bridge", () =>
          Fs.writeFile(`/proc/sys/net/ipv4/conf/${config.bridge}/rp_filter`, "1").catch(() => undefined)
        )
      })
      yield* ensureBridge

      // Lifecycle steps of one sandbox run one at a time in this process.
      const locks = new Map<string, Semaphore.Semaphore>()
      const withLock = <A, E>(sandboxId: string, effect: Effect.Effect<A, E>) => {
        let lock = locks.get(sandboxId)
        if (lock === undefined) {
          lock = Semaphore.makeUnsafe(1)
          locks.set(sandboxId, lock)
        }
        return lock.withPermit(effect)
      }

      const owner = (sandboxId: string) => ({ dataDir: config.dataDir, sandboxId })

      const templateDir = (template: string): Effect.Effect<string, TemplateNotFound | DriverFailure> => {
        if (template === BASE_TEMPLATE) return Effect.succeed(baseDir)
        const dir = NodePath.join(templatesDir, template)
        return attempt("template", () => Fs.stat(dir).then((s) => s.isDirectory(), () => false)).pipe(
          Effect.flatMap((ok) => (ok ? Effect.succeed(dir) : Effect.fail(new TemplateNotFound({ template }))))
        )
      }

      /** Starts bubblewrap detached and waits for the init's readiness byte. */
      const spawnSandbox = (record: SandboxRecord, paths: SandboxPaths, procsFiles: ReadonlyArray<string>) =>
        Effect.callback<number, DriverFailure>((resume) => {
          // The init needs no user variables: execs get them (so they never sit in pid 1's cmdline).
          const env: Record<string, string> = { PATH: SANDBOX_PATH, HOME: "/root", HOSTNAME: record.sandboxId }
          const bwrapArgs = [
            "--bind", paths.root, "/",
            "--proc", "/proc",
            "--dev", "/dev",
            "--ro-bind", helperDir, HELPER_DIR,
            "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--unshare-cgroup-try",
            "--hostname", record.sandboxId,
            // Root inside may not reconfigure its network (addresses, routes, raw frames).
            "--cap-drop", "CAP_NET_ADMIN", "--cap-drop", "CAP_NET_RAW",
            "--new-session",
            "--clearenv",
            ...Object.entries(env).flatMap(([k, v]) => ["--setenv", k, v]),
            "--chdir", "/",
            "--info-fd", "3"
          ]
          let logFd: number
          try {
            logFd = FsSync.openSync(paths.log, "a", 0o600)
          } catch (e) {
            resume(Effect.fail(new DriverFailure({ operation: "start", message: errorMessage(e) })))
            return
          }
          const child = spawn(
            unshare,
            [
              "--mount", "--propagation", "private", sh, "-c", START_SCRIPT, "sh",
              // bwrap reads its options from fd 5: host paths stay out of pid 1's cmdline inside.
              ...procsFiles, "--", record.templateDir, paths.upper, paths.work, paths.root, bwrap, "--args", "5",
              HELPER, "sh", "-c", INIT_SCRIPT
            ],
            { detached: true, stdio: ["ignore", logFd, logFd, "pipe", "pipe", "pipe"], env: HOST_ENV }
          )
          FsSync.closeSync(logFd)
          const argsPipe = (child.stdio as ReadonlyArray<unknown>)[5] as NodeJS.WritableStream
          argsPipe.on("error", () => undefined)
          argsPipe.end(bwrapArgs.map((arg) => arg + "\0").join(""))
          let info = ""
          let pid: number | undefined
          let ready = false
          let done = false
          const infoPipe = child.stdio[3] as NodeJS.ReadableStream
          const readyPipe = child.stdio[4] as NodeJS.ReadableStream
          const finish = (result: Effect.Effect<number, DriverFailure>) => {
            if (done) return
            done = true
            clearTimeout(timer)
            ;(infoPipe as unknown as { destroy(): void }).destroy()
            ;(readyPipe as unknown as { destroy(): void }).destroy()
            // The sandbox outlives this process: do not keep the event loop for it.
            child.unref()
            resume(result)
          }
          const fail = (why: string) => {
            const log = (() => {
              try {
                return FsSync.readFileSync(paths.log, "utf8").slice(-2000)
              } catch {
                return ""
              }
            })()
            if (pid !== undefined) {
              try {
                process.kill(pid, "SIGKILL")
              } catch {
                // Gone.
              }
            }
            try {
              if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL")
            } catch {
              // Gone.
            }
            finish(Effect.fail(new DriverFailure({ operation: "start", message: `${why}: ${log.trim()}` })))
          }
          const check = () => {
            if (ready && pid !== undefined) finish(Effect.succeed(pid))
          }
          infoPipe.on("data", (chunk: Buffer) => {
            info += chunk.toString("utf8")
            const match = /"child-pid":\s*(\d+)/.exec(info)
            if (match) {
              pid = Number(match[1])
              check()
            }
          })
          readyPipe.on("data", () => {
            ready = true
            check()
          })
          child.on("error", (e) => fail(e.message))
          child.on("exit", (code, signal) => fail(`bubblewrap exited (${code ?? signal}) before the sandbox was ready`))
          const timer = setTimeout(() => fail("the sandbox did not become ready within 20 s"), 20_000)
        })

      /** Makes the veth pair and configures the sandbox end. */
      const attachNetwork = (pid: number, internalIp: string) =>
        Effect.gen(function*() {
          const { host } = Network.vethNames(internalIp)
          if (yield* attempt("network", () => Network.interfaceExists(host))) {
            yield* run("network", ip, ["link", "del", host], { env: HOST_ENV, timeoutMs: 10_000 })
          }
          yield* runChecked("network", ip, ["-batch", "-"], {
            env: HOST_ENV,
            stdin: Buffer.from(Network.hostScript(config.bridge, internalIp, pid))
          })
          yield* runChecked("network", nsenter, ["-t", String(pid), "-n", ip, "-batch", "-"], {
            env: HOST_ENV,
            stdin: Buffer.from(Network.sandboxScript(internalIp, subnet))
          })
        })

      const detachNetwork = (internalIp: string) =>
        Effect.gen(function*() {
          const { host } = Network.vethNames(internalIp)
          if (yield* attempt("network", () => Network.interfaceExists(host))) {
            const result = yield* run("network", ip, ["link", "del", host], { env: HOST_ENV, timeoutMs: 10_000 })
            // The kernel may have removed it with the namespace meanwhile.
            if (result.exitCode !== 0 && (yield* attempt("network", () => Network.interfaceExists(host)))) {
              return yield* new DriverFailure({ operation: "network", message: decode(result.stderr) })
            }
          }
        })

      /** Ends every process of a run and removes what belongs to it; the file system stays. */
      const teardownRun = (record: SandboxRecord, paths: SandboxPaths, runRecord: RunRecord | undefined) =>
        Effect.gen(function*() {
          if (runRecord !== undefined && (yield* attempt("stop", () => isAlive(runRecord)))) {
            // SIGKILL to pid 1 of the namespace ends every process in it at once.
            yield* attempt("stop", async () => {
              try {
                process.kill(runRecord.pid, "SIGKILL")
              } catch {
                // Raced with its exit.
              }
              for (let i = 0; i < 500 && (await isAlive(runRecord)); i++) await sleep(10)
            })
          }
          yield* attempt("stop", () => Cgroups.removeAll(cgroups, record.sandboxId))
          yield* detachNetwork(record.internalIp)
          yield* attempt("stop", () => Fs.rm(paths.run, { force: true }))
        })

      const running = new Map<string, { record: SandboxRecord; run: RunRecord }>()

      const loadRecord = (sandboxId: string) =>
        Effect.gen(function*() {
          const paths = sandboxPaths(config.dataDir, sandboxId)
          const record = yield* attempt("load", () => readSandboxRecord(paths))
          if (record === undefined) return yield* new SandboxNotFound({ sandboxId })
          return { paths, record }
        })

      /** The running instance, checked against pid reuse on every call. */
      const lookupRunning = (sandboxId: unknown) =>
        Effect.gen(function*() {
          const id = yield* checkId(sandboxId)
          const cached = running.get(id)
          if (cached !== undefined && (yield* attempt("lookup", () => isAlive(cached.run)))) return cached
          running.delete(id)
          const { paths, record } = yield* loadRecord(id)
          const runRecord = yield* attempt("lookup", () => readRunRecord(paths))
          if (runRecord === undefined || !(yield* attempt("lookup", () => isAlive(runRecord)))) {
            return yield* new SandboxNotRunning({ sandboxId: id })
          }
          const entry = { record, run: runRecord }
          running.set(id, entry)
          return entry
        })

      const infoOf = (record: SandboxRecord, runRecord: RunRecord) =>
        new SandboxInfo({
          sandboxId: record.sandboxId,
          pid: runRecord.pid,
          internalIp: record.internalIp,
          startedAt: runRecord.startedAt,
          limits: runRecord.limits
        })

      const startInternal = (initial: SandboxRecord, paths: SandboxPaths) =>
        Effect.gen(function*() {
          let record = initial
          const existing = yield* attempt("start", () => readRunRecord(paths))
          if (existing !== undefined && (yield* attempt("start", () => isAlive(existing)))) return infoOf(record, existing)
          // Leftovers of a run that ended without stop (crash, reboot): clear them first.
          yield* teardownRun(record, paths, existing)

          // The lease normally persists; after a reboot (/run is empty) take the same address back.
          const leased = yield* attempt("start", () =>
            Network.lease(config.leaseDir, subnet, owner(record.sandboxId), record.internalIp)
          )
          if (leased === undefined) return yield* new DriverFailure({ operation: "start", message: "no free internal address" })
          if (leased !== record.internalIp) {
            record = new SandboxRecord({ ...record, internalIp: leased })
            yield* attempt("start", () => writeSandboxRecord(paths, record))
          }

          const prepared = yield* attempt("start", () =>
            Cgroups.prepare(cgroups, record.sandboxId, { ramMb: record.ramMb, cpu: record.cpu, pidsMax: config.pidsMax, diskGb: record.diskGb })
          )
          const pid = yield* spawnSandbox(record, paths, prepared.procsFiles)
          const started = yield* attempt("start", () => procStat(pid))
          const runRecord = new RunRecord({
            pid,
            startTicks: started?.startTicks ?? 0,
            startedAt: new Date().toISOString(),
            limits: prepared.limits
          })
          // Written before the network so that a failure below still finds the process to kill.
          yield* attempt("start", () => writeRunRecord(paths, runRecord))
          yield* attachNetwork(pid, record.internalIp).pipe(
            Effect.tapError(() => teardownRun(record, paths, runRecord).pipe(Effect.ignore))
          )
          running.set(record.sandboxId, { record, run: runRecord })
          return infoOf(record, runRecord)
        })

      /** Refuses to delete a folder that something still has mounted (it would recurse into it). */
      const assertNothingMounted = (dir: string) =>
        attempt("destroy", async () => {
          const mounts = await Fs.readFile("/proc/self/mountinfo", "utf8")
          for (const line of mounts.split("\n")) {
            const mountPoint = line.split(" ")[4]
            if (mountPoint !== undefined && (mountPoint === dir || mountPoint.startsWith(dir + "/"))) {
              throw new Error(`${mountPoint} is still mounted`)
            }
          }
        })

      const destroyInternal = (sandboxId: string) =>
        Effect.gen(function*() {
          running.delete(sandboxId)
          const paths = sandboxPaths(config.dataDir, sandboxId)
          const record = yield* attempt("destroy", () => readSandboxRecord(paths))
          if (record !== undefined) {
            const runRecord = yield* attempt("destroy", () => readRunRecord(paths))
            yield* teardownRun(record, paths, runRecord)
            yield* attempt("destroy", () => Network.release(config.leaseDir, record.internalIp, owner(sandboxId)))
            if (record.sandboxId !== sandboxId) {
              // Half adopted (see `adopt`): the folder has the new name, the record the old one.
              yield* attempt("destroy", () => Cgroups.removeAll(cgroups, sandboxId))
              yield* attempt("destroy", () => Network.release(config.leaseDir, record.internalIp, owner(record.sandboxId)))
            }
          } else {
            yield* attempt("destroy", () => Cgroups.removeAll(cgroups, sandboxId))
          }
          yield* assertNothingMounted(paths.dir)
          yield* attempt("destroy", () => Fs.rm(paths.dir, { recursive: true, force: true }))
        })

      const create = Effect.fn("SandboxDriver.create")(function*(input: SandboxSpec) {
        const spec = yield* decodeInput(SandboxSpec, input)
        return yield* withLock(
          spec.sandboxId,
          Effect.gen(function*() {
            const paths = sandboxPaths(config.dataDir, spec.sandboxId)
            if ((yield* attempt("create", () => readSandboxRecord(paths))) !== undefined) {
              return yield* new SandboxAlreadyExists({ sandboxId: spec.sandboxId })
            }
            const lower = yield* templateDir(spec.template)
            // A folder without a record is a create that died halfway: start clean.
            yield* destroyInternal(spec.sandboxId)
            const internalIp = yield* attempt("create", () => Network.lease(config.leaseDir, subnet, owner(spec.sandboxId)))
            if (internalIp === undefined) {
              return yield* new SandboxCapacityExhausted({ message: `no free address in ${config.subnet}` })
            }
            const record = new SandboxRecord({
              sandboxId: spec.sandboxId,
              hostId: config.hostId,
              template: spec.template,
              templateDir: lower,
              env: spec.env,
              cpu: spec.cpu,
              ramMb: spec.ramMb,
              diskGb: spec.diskGb,
              exposedPorts: spec.exposedPorts,
              internalIp,
              createdAt: new Date().toISOString()
            })
            const made = attempt("create", async () => {
              for (const dir of [paths.dir, paths.upper, paths.work, paths.root]) await Fs.mkdir(dir, { recursive: true, mode: 0o700 })
              // The overlay's root takes the template's mode; the folder above stays private.
              await Fs.chmod(paths.root, 0o755)
              await writeSandboxRecord(paths, record)
            })
            return yield* made.pipe(
              Effect.flatMap(() => startInternal(record, paths)),
              Effect.tapError(() => destroyInternal(spec.sandboxId).pipe(Effect.ignore))
            )
          })
        )
      })

      /**
       * Renames a running sandbox and applies the spec's settings. The order keeps a crash at any
       * point recoverable by `destroy` of one of the two ids: the folder is renamed first (from
       * then on the sandbox is `spec.sandboxId`; `destroy` handles a record still naming `fromId`),
       * then its cgroups (cgroup v1 renames within a parent), the record, the lease, the hostname.
       */
      const adopt = Effect.fn("SandboxDriver.adopt")(function*(fromId: string, input: SandboxSpec) {
        const from = yield* checkId(fromId)
        const spec = yield* decodeInput(SandboxSpec, input)
        if (from === spec.sandboxId) return yield* invalid("adopt: the new id must differ from the old one")
        return yield* withLock(from, withLock(spec.sandboxId, Effect.gen(function*() {
          const target = sandboxPaths(config.dataDir, spec.sandboxId)
          if ((yield* attempt("adopt", () => Fs.lstat(target.dir).then(() => true, () => false)))) {
            return yield* new SandboxAlreadyExists({ sandboxId: spec.sandboxId })
          }
          const entry = yield* lookupRunning(from)
          if (entry.record.template !== spec.template) {
            return yield* invalid(`adopt: ${from} was made from template ${entry.record.template}, not ${spec.template}`)
          }
          const source = sandboxPaths(config.dataDir, from)
          running.delete(from)
          yield* attempt("adopt", () => Fs.rename(source.dir, target.dir))
          return yield* Effect.gen(function*() {
            yield* attempt("adopt", async () => {
              for (const controller of Cgroups.CONTROLLERS) {
                const dir = Cgroups.groupPath(cgroups, controller, from)
                if (await Fs.stat(dir).then(() => true, () => false)) await Fs.rename(dir, Cgroups.groupPath(cgroups, controller, spec.sandboxId))
              }
            })
            const record = new SandboxRecord({
              ...entry.record,
              sandboxId: spec.sandboxId,
              env: spec.env,
              cpu: spec.cpu,
              ramMb: spec.ramMb,
              diskGb: spec.diskGb,
              exposedPorts: spec.exposedPorts,
              createdAt: new Date().toISOString()
            })
            yield* attempt("adopt", () => writeSandboxRecord(target, record))
            const handed = yield* attempt("adopt", () =>
              Network.transfer(config.leaseDir, record.internalIp, owner(from), owner(spec.sandboxId))
            )
            if (!handed) {
              return yield* new DriverFailure({ operation: "adopt", message: `the address ${record.internalIp} was taken meanwhile` })
            }
            // Raising the memory limit needs the swap limit raised first (memsw >= memory).
            yield* attempt("adopt", () =>
              Fs.writeFile(
                NodePath.join(Cgroups.groupPath(cgroups, "memory", spec.sandboxId), "memory.memsw.limit_in_bytes"),
                String(spec.ramMb * 1024 * 1024)
              ).catch(() => undefined)
            )
            const prepared = yield* attempt("adopt", () =>
              Cgroups.prepare(cgroups, spec.sandboxId, { ramMb: spec.ramMb, cpu: spec.cpu, pidsMax: config.pidsMax, diskGb: spec.diskGb })
            )
            // The uts namespace belongs to the sandbox's user namespace; host root may join it.
            yield* runChecked("adopt", nsenter, ["-t", String(entry.run.pid), "-u", "--", sh, "-c", `printf %s "$1" > /proc/sys/kernel/hostname`, "sh", spec.sandboxId], {
              env: HOST_ENV
            })
            const runRecord = new RunRecord({ ...entry.run, limits: prepared.limits })
            yield* attempt("adopt", () => writeRunRecord(target, runRecord))
            running.set(spec.sandboxId, { record, run: runRecord })
            return infoOf(record, runRecord)
          }).pipe(Effect.tapError(() => destroyInternal(spec.sandboxId).pipe(Effect.ignore)))
        })))
      })

      const start = Effect.fn("SandboxDriver.start")(function*(sandboxId: string) {
        const id = yield* checkId(sandboxId)
        return yield* withLock(
          id,
          Effect.gen(function*() {
            const { paths, record } = yield* loadRecord(id)
            return yield* startInternal(record, paths)
          })
        )
      })

      const stop = Effect.fn("SandboxDriver.stop")(function*(sandboxId: string) {
        const id = yield* checkId(sandboxId)
        yield* withLock(
          id,
          Effect.gen(function*() {
            running.delete(id)
            const { paths, record } = yield* loadRecord(id)
            const runRecord = yield* attempt("stop", () => readRunRecord(paths))
            yield* teardownRun(record, paths, runRecord)
          })
        )
      })

      const destroy = Effect.fn("SandboxDriver.destroy")(function*(sandboxId: string) {
        const id = yield* checkId(sandboxId)
        yield* withLock(id, destroyInternal(id))
      })

      let execCounter = 0

      /** Runs argv inside the sandbox: its namespaces, its cgroups, a nested user namespace. */
      const runInside = (
        entry: { record: SandboxRecord; run: RunRecord },
        argv: ReadonlyArray<string>,
        options: { env: Record<string, string>; cwd: string } & Pick<RunOptions, "stdin" | "timeoutMs" | "maxOutputBytes">
      ) =>
        Effect.gen(function*() {
          const id = entry.record.sandboxId
          const execGroup = yield* attempt("exec", () =>
            Cgroups.makeExecGroup(cgroups, id, `x${process.pid}-${++execCounter}-${randomBytes(3).toString("hex")}`)
          )
          const procsFiles = [
            ...(["memory", "cpu", "cpuacct"] as const)
              .map((c) => NodePath.join(Cgroups.groupPath(cgroups, c, id), "cgroup.procs"))
              .filter((file) => FsSync.existsSync(file)),
            ...(execGroup !== undefined ? [NodePath.join(execGroup, "cgroup.procs")] : [])
          ]
          const args = [
            "-c", JOIN_SCRIPT, "sh", ...procsFiles, "--",
            nsenter, "-t", String(entry.run.pid), "-a", "--",
            // A nested user namespace: root inside keeps its file powers but holds no capability
            // over the sandbox's network, mounts or init (they belong to the parent namespace).
            HELPER, "unshare", "-U", "-r", "--",
            // The environment travels as arguments: host-side programs never see it (LD_PRELOAD).
            HELPER, "env", "-i", "--", ...Object.entries(options.env).map(([k, v]) => `${k}=${v}`),
            HELPER, "sh", "-c", CWD_SCRIPT, options.cwd, ...argv
          ]
          const result = yield* run("exec", sh, args, {
            env: HOST_ENV,
            ...(options.stdin !== undefined ? { stdin: options.stdin } : {}),
            ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
            ...(options.maxOutputBytes !== undefined ? { maxOutputBytes: options.maxOutputBytes } : {}),
            killTree: () => {
              if (execGroup !== undefined) Cgroups.killGroupSync(execGroup)
            }
          }).pipe(Effect.ensuring(execGroup !== undefined ? attempt("exec", () => Cgroups.removeIfEmpty(execGroup)).pipe(Effect.ignore) : Effect.void))
          return result
        })

      const sandboxEnv = (record: SandboxRecord, extra: Record<string, string> = {}) => ({
        PATH: SANDBOX_PATH,
        HOME: "/root",
        HOSTNAME: record.sandboxId,
        ...record.env,
        ...extra
      })

      const exec = Effect.fn("SandboxDriver.exec")(function*(sandboxId: string, input: ExecRequest) {
        const request = yield* decodeInput(ExecRequest, input)
        const entry = yield* lookupRunning(sandboxId)
        const result = yield* runInside(entry, request.cmd, {
          env: sandboxEnv(entry.record, request.env),
          cwd: request.cwd ?? "/",
          ...(request.stdin !== undefined
            ? { stdin: typeof request.stdin === "string" ? Buffer.from(request.stdin, "utf8") : request.stdin }
            : {}),
          ...(request.timeoutMs !== undefined ? { timeoutMs: request.timeoutMs } : {}),
          maxOutputBytes: request.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES
        })
        return new ExecResult(result)
      })

      /** Runs a file API script; maps its exit code to the refusal it stands for. */
      const fileOp = (
        sandboxId: string,
        path: string,
        script: string,
        extraArgs: ReadonlyArray<string>,
        options: Pick<RunOptions, "stdin" | "maxOutputBytes"> = {}
      ) =>
        Effect.gen(function*() {
          const entry = yield* lookupRunning(sandboxId)
          // The scripts call the helper busybox by path: they work in templates without one.
          const result = yield* runInside(entry, [HELPER, "sh", "-c", script, "sh", path, ...extraArgs], {
            env: { PATH: SANDBOX_PATH },
            cwd: "/",
            timeoutMs: FILE_OP_TIMEOUT_MS,
            ...options
          })
          const fileError = (reason: SandboxFileError["reason"], message: string) =>
            new SandboxFileError({ sandboxId: entry.record.sandboxId, path, reason, message })
          if (result.timedOut) return yield* fileError("failed", "timed out")
          if (result.exitCode !== 0) {
            const stderr = decode(result.stderr).trim()
            const reason = FILE_EXIT[result.exitCode] ?? (/denied|not permitted|read-only/i.test(stderr) ? "permission_denied" : "failed")
            return yield* fileError(reason, stderr.slice(0, 500) || reason)
          }
          return { result, fileError }
        })

      const readFile = Effect.fn("SandboxDriver.readFile")(function*(
        sandboxId: string,
        path: string,
        options?: { readonly maxBytes?: number }
      ) {
        const checked = yield* checkPath(path)
        const max = Math.min(Math.max(0, Math.floor(options?.maxBytes ?? MAX_FILE_BYTES)), MAX_FILE_BYTES)
        const { result, fileError } = yield* fileOp(sandboxId, checked, READ_SCRIPT, [String(max + 1)], {
          maxOutputBytes: max + 1
        })
        if (result.stdout.length > max) return yield* fileError("too_large", `larger than ${max} bytes`)
        return result.stdout
      })

      const writeFile = Effect.fn("SandboxDriver.writeFile")(function*(
        sandboxId: string,
        path: string,
        bytes: Uint8Array,
        mode?: number
      ) {
        const checked = yield* checkPath(path)
        const fileMode = yield* decodeInput(FileMode, mode ?? 0o644)
        if (!(bytes instanceof Uint8Array)) return yield* invalid("bytes must be a Uint8Array")
        if (bytes.length > MAX_FILE_BYTES) {
          return yield* new SandboxFileError({ sandboxId, path: checked, reason: "too_large", message: `at most ${MAX_FILE_BYTES} bytes` })
        }
        yield* fileOp(sandboxId, checked, WRITE_SCRIPT, [fileMode.toString(8)], { stdin: bytes, maxOutputBytes: 64 * 1024 })
      })

      const stat = Effect.fn("SandboxDriver.stat")(function*(sandboxId: string, path: string) {
        const checked = yield* checkPath(path)
        const { result, fileError } = yield* fileOp(sandboxId, checked, STAT_SCRIPT, [], { maxOutputBytes: 4096 })
        const parsed = parseStatLine(decode(result.stdout))
        if (parsed === undefined) return yield* fileError("failed", "unreadable stat output")
        return new FileStat(parsed)
      })

      const listDir = Effect.fn("SandboxDriver.listDir")(function*(sandboxId: string, path: string) {
        const checked = yield* checkPath(path)
        const { result } = yield* fileOp(sandboxId, checked, LIST_SCRIPT, [], { maxOutputBytes: 16 * 1024 * 1024 })
        const entries: Array<DirEntry> = []
        for (const record of Buffer.from(result.stdout).toString("utf8").split("\0")) {
          const match = /^([0-9a-f]+ \d+ -?\d+) ([\s\S]+)$/.exec(record)
          if (!match) continue
          const parsed = parseStatLine(match[1]!)
          if (parsed !== undefined) entries.push(new DirEntry({ name: match[2]!, ...parsed }))
        }
        return entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
      })

      const stats = Effect.fn("SandboxDriver.stats")(function*(sandboxId: string) {
        const entry = yield* lookupRunning(sandboxId)
        const read = yield* attempt("stats", () => Cgroups.readStats(cgroups, entry.record.sandboxId))
        return new SandboxStats({
          memoryBytes: read.memoryBytes ?? 0,
          ...(read.cpuUsageNs !== undefined ? { cpuUsageNs: read.cpuUsageNs } : {}),
          pids: read.pids ?? 0
        })
      })

      const list = Effect.gen(function*() {
        const names = yield* attempt("list", () => Fs.readdir(sandboxesDir).catch(() => [] as Array<string>))
        const rows: Array<SandboxListing> = []
        for (const name of names) {
          if (!Schema.is(SandboxId)(name)) continue
          const paths = sandboxPaths(config.dataDir, name)
          const record = yield* attempt("list", () => readSandboxRecord(paths))
          if (record === undefined) continue
          const runRecord = yield* attempt("list", () => readRunRecord(paths))
          const alive = runRecord !== undefined && (yield* attempt("list", () => isAlive(runRecord)))
          rows.push(
            new SandboxListing({
              sandboxId: record.sandboxId,
              status: alive ? "running" : "stopped",
              internalIp: record.internalIp,
              ...(alive ? { pid: runRecord!.pid, startedAt: runRecord!.startedAt } : {}),
              createdAt: record.createdAt,
              template: record.template
            })
          )
        }
        return rows
      }).pipe(Effect.withSpan("SandboxDriver.list"))

      const pty = Effect.fn("SandboxDriver.pty")(function*(sandboxId: string, _request: unknown) {
        yield* lookupRunning(sandboxId)
        return yield* new DriverUnsupported({ operation: "pty", message: "terminals are not implemented by the namespaces driver yet" })
      })

      // A lifecycle step cut in half would leave processes, devices or leases behind: once begun,
      // it runs to its end even if the caller is interrupted.
      return SandboxDriver.of({
        create: (spec) => Effect.uninterruptible(create(spec)),
        adopt: (fromId, spec) => Effect.uninterruptible(adopt(fromId, spec)),
        start: (sandboxId) => Effect.uninterruptible(start(sandboxId)),
        stop: (sandboxId) => Effect.uninterruptible(stop(sandboxId)),
        destroy: (sandboxId) => Effect.uninterruptible(destroy(sandboxId)),
        exec,
        readFile,
        writeFile,
        listDir,
        stat,
        stats,
        list,
        pty
      })
    })
  )
}

export { DriverConfig }
