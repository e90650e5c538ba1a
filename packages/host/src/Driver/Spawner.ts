/**
 * The driver's process starter: every host command the driver runs (svc-start, svc-enter, ip,
 * mkfs, nft, ...) is started by `svc-spawner` (native/svc-spawner.c), a small C process the
 * driver starts once, and not by a fork of the agent. A fork copies the page tables of all of
 * the agent's memory (~150 MB: ~5.6 ms of CPU and a blocked event loop per command); the
 * spawner's fork costs ~0.1 ms and runs beside the event loop.
 *
 * Node cannot receive descriptors over a socket, so the pipes are handed over by name: the
 * spawner makes them, and the agent opens its ends as `/proc/<spawner>/fd/N` (opening a pipe
 * there gives the same pipe; only root can, the spawner is not dumpable), then tells the
 * spawner to close its copies. Bytes then flow between the agent and the command directly, with
 * the kernel's backpressure; the spawner only reports starts and wait statuses.
 *
 * Requests go over the spawner's stdin, a pipe only the agent holds: nothing else can ask it for
 * anything. Secrets stay where they were: an environment travels in a request and into a pipe
 * the command reads (`{ data }`), never on a command line.
 *
 * Four requests start no program at all: a sandbox's veth pair (`veth`, rtnetlink from the
 * spawner, where two `ip -batch` runs were), its removal (`unlink`, where an `ip link del` was),
 * an adopted sandbox's hostname and /dev/shm (`adoptInside`, where `nsenter` and a busybox
 * shell were) and a transfer's bytes spliced between a connection and a pipe (`splice`). The
 * spawner does each in a forked child that never execs (the child may join the sandbox's
 * namespaces; the spawner never does).
 *
 * If the spawner dies, the commands it started and still tracked are killed by the kernel
 * (PR_SET_PDEATHSIG), except those that must outlive it (a sandbox's bubblewrap), and each
 * `Spawned` of it emits `error` (`SpawnerLost`) then `exit`; the next spawn starts a new one.
 */
import { spawn as nodeSpawn } from "node:child_process"
import { EventEmitter } from "node:events"
import * as FsSync from "node:fs"
import * as Net from "node:net"
import * as Os from "node:os"
import type { Readable, Writable } from "node:stream"

/** What a command's descriptor is (its index in `stdio`). */
export type StdioSpec =
  /** Nothing (0 to 2: /dev/null). */
  | "ignore"
  /** A pipe the command reads: the agent's end is a writable socket. */
  | "in"
  /** A pipe the command writes: the agent's end is a readable socket. */
  | "out"
  /** A pipe holding these bytes, then end of file (an environment, arguments). */
  | { readonly data: Uint8Array }
  /** This file, opened to append (created 0600). */
  | { readonly append: string }
  /** This file, truncated (created 0600). */
  | { readonly truncate: string }
  /** The same open file as the command's descriptor `sameAs` (an earlier one). */
  | { readonly sameAs: number }

export interface SpawnOptions {
  /** The command's complete environment (nothing is inherited). */
  readonly env: Readonly<Record<string, string>>
  /** At least descriptors 0 to 2. */
  readonly stdio: ReadonlyArray<StdioSpec>
  /** Keeps running if the spawner dies (a sandbox's host-side bubblewrap); otherwise killed. */
  readonly outlive?: boolean
}

/** The spawner ended while this command ran: how it ended is unknown, and it was killed. */
export class SpawnerLost extends Error {
  constructor() {
    super("the process spawner (svc-spawner) ended while the command ran; it was killed")
    this.name = "SpawnerLost"
  }
}

/** A command could not be started (its program is missing, a file could not be opened, ...). */
export class SpawnFailed extends Error {
  readonly errno: number
  constructor(errno: number, message: string) {
    super(message)
    this.name = "SpawnFailed"
    this.errno = errno
  }
}

/** A sandbox's veth pair (`veth`): what `Network.ts`'s two `ip -batch` scripts set up. */
export interface VethRequest {
  /** The sandbox's init and its start time (`run.json`): its network namespace gets the inner end. */
  readonly pid: number
  readonly startTicks: number
  readonly bridge: string
  /** The host end's name (`sv<ip in hex>`). */
  readonly hostEnd: string
  /** The inner end's (eth0's) MAC. */
  readonly mac: string
  readonly ip: string
  readonly prefix: number
  /** A default route via this gateway (with egress only). */
  readonly gateway: string | undefined
}

/** An adopted sandbox's new hostname and /dev/shm size (`adoptInside`). */
export interface AdoptRequest {
  readonly pid: number
  readonly startTicks: number
  readonly hostname: string
  readonly shmBytes: number
}

const signalNames = new Map<number, NodeJS.Signals>(
  Object.entries(Os.constants.signals).map(([name, number]) => [number, name as NodeJS.Signals])
)

const signalNumber = (signal: NodeJS.Signals | number): number =>
  typeof signal === "number" ? signal : (Os.constants.signals[signal] ?? 9)

/**
 * A command the spawner started, shaped like the parts of Node's `ChildProcess` the driver uses:
 * `pid`, `stdio` (sockets for "in" and "out", else null), `exitCode`/`signalCode`, the events
 * `exit` (code, signal) and `close` (after `exit` and every stdio socket closed), and `error`
 * (only `SpawnerLost`). It runs in a session (and process group) of its own.
 */
export class Spawned extends EventEmitter {
  readonly pid: number
  readonly stdio: ReadonlyArray<Net.Socket | null>
  exitCode: number | null = null
  signalCode: NodeJS.Signals | null = null
  /** @internal */
  ended = false
  /** @internal */
  referenced = true
  readonly #client: Client
  readonly #id: number
  #open: number

  constructor(client: Client, id: number, pid: number, stdio: ReadonlyArray<Net.Socket | null>) {
    super()
    this.#client = client
    this.#id = id
    this.pid = pid
    this.stdio = stdio
    const sockets = stdio.filter((s): s is Net.Socket => s !== null)
    this.#open = sockets.length
    for (const socket of sockets) {
      socket.once("close", () => {
        this.#open--
        this.#maybeClose()
      })
    }
  }

  get stdin(): Writable | null {
    return this.stdio[0] ?? null
  }
  get stdout(): Readable | null {
    return this.stdio[1] ?? null
  }
  get stderr(): Readable | null {
    return this.stdio[2] ?? null
  }

  /** Signals the command itself (as `ChildProcess.kill`); false once it has ended. */
  kill(signal: NodeJS.Signals | number = "SIGTERM"): boolean {
    if (this.ended) return false
    this.#client.kill(this.#id, this.pid, signalNumber(signal), false)
    return true
  }

  /** Signals its whole process group (it and what it started without leaving the group). */
  killGroup(signal: NodeJS.Signals | number = "SIGKILL"): void {
    if (!this.ended) this.#client.kill(this.#id, this.pid, signalNumber(signal), true)
  }

  /** The agent's event loop does not wait for this command any more. */
  unref(): void {
    if (this.referenced) {
      this.referenced = false
      this.#client.updateRef()
    }
  }

  /**
   * `exit`, `close` and a lost spawner's `error` are kept: a listener added after they fired
   * still gets them (on the next tick). The start resolves a promise, so the caller's listeners
   * come a few microtasks after its start answer, and its end may be in the same read.
   */
  override on(event: string | symbol, listener: (...args: Array<any>) => void): this {
    super.on(event, listener)
    this.#replay(event, listener)
    return this
  }
  override once(event: string | symbol, listener: (...args: Array<any>) => void): this {
    const sticky = this.#sticky(event)
    if (sticky !== undefined) {
      process.nextTick(() => listener(...sticky))
      return this
    }
    return super.once(event, listener)
  }
  override addListener(event: string | symbol, listener: (...args: Array<any>) => void): this {
    return this.on(event, listener)
  }

  #lost: Error | undefined
  #closed = false

  #sticky(event: string | symbol): ReadonlyArray<unknown> | undefined {
    if (event === "exit" && this.ended) return [this.exitCode, this.signalCode]
    if (event === "close" && this.#closed) return [this.exitCode, this.signalCode]
    if (event === "error" && this.#lost !== undefined) return [this.#lost]
    return undefined
  }

  #replay(event: string | symbol, listener: (...args: Array<any>) => void): void {
    const sticky = this.#sticky(event)
    if (sticky !== undefined) process.nextTick(() => listener(...sticky))
  }

  /** @internal */
  exited(code: number | null, signal: NodeJS.Signals | null, error?: Error): void {
    if (this.ended) return
    this.ended = true
    this.exitCode = code
    this.signalCode = signal
    if (error !== undefined) {
      this.#lost = error
      if (this.listenerCount("error") > 0) super.emit("error", error)
    }
    super.emit("exit", code, signal)
    this.#maybeClose()
  }

  #maybeClose(): void {
    if (this.ended && this.#open === 0) {
      this.#open = -1
      this.#closed = true
      super.emit("close", this.exitCode, this.signalCode)
    }
  }
}

interface Pending {
  readonly resolve: (spawned: Spawned) => void
  readonly reject: (error: Error) => void
  readonly stdio: ReadonlyArray<StdioSpec>
}

interface PendingTask {
  /** With what the task reported beside `D` (a splice's byte count), if anything. */
  readonly resolve: (result: string | undefined) => void
  readonly reject: (error: Error) => void
}

const u32 = (n: number) => {
  const b = Buffer.alloc(4)
  b.writeUInt32LE(n >>> 0)
  return b
}
const field = (bytes: Uint8Array | string) => {
  const b = typeof bytes === "string" ? Buffer.from(bytes, "utf8") : Buffer.from(bytes)
  return [u32(b.length), b]
}

/** One running spawner process. */
class Client {
  readonly child: ReturnType<typeof nodeSpawn>
  readonly pid: number
  dead = false
  #nextId = 1
  readonly #pending = new Map<number, Pending>()
  readonly #tasks = new Map<number, PendingTask>()
  readonly #children = new Map<number, Spawned>()
  #buffer = ""

  constructor(binary: string) {
    // The one fork of the agent: once per spawner. A session of its own, so that a terminal's
    // Ctrl-C to the agent's group does not end it (end of file on its stdin does).
    this.child = nodeSpawn(binary, [], { stdio: ["pipe", "pipe", "inherit"], detached: true, env: {} })
    if (this.child.pid === undefined) {
      this.dead = true
      this.pid = -1
    } else {
      this.pid = this.child.pid
    }
    this.child.stdin!.on("error", () => undefined)
    this.child.stdout!.setEncoding("latin1")
    this.child.stdout!.on("data", (text: string) => this.#onData(text))
    this.child.once("error", () => this.#lost())
    this.child.once("exit", () => this.#lost())
    this.child.stdout!.once("close", () => this.#lost())
    this.updateRef()
  }

  /** The agent's event loop waits for the spawner only while a start or a referenced command is pending. */
  updateRef(): void {
    if (this.dead) return
    const busy = this.#pending.size > 0 || this.#tasks.size > 0 ||
      [...this.#children.values()].some((c) => c.referenced)
    const handles = [this.child, this.child.stdout, this.child.stdin] as Array<unknown>
    for (const handle of handles) {
      const h = handle as { ref?: () => void; unref?: () => void }
      if (busy) h.ref?.()
      else h.unref?.()
    }
  }

  #send(parts: ReadonlyArray<Buffer>): void {
    const body = Buffer.concat(parts)
    this.child.stdin!.write(Buffer.concat([u32(body.length), body]))
  }

  spawn(file: string, args: ReadonlyArray<string>, options: SpawnOptions): Promise<Spawned> {
    if (this.dead) return Promise.reject(new SpawnerLost())
    const id = this.#nextId++
    const env = Object.entries(options.env).map(([k, v]) => `${k}=${v}`)
    const argv = [file, ...args]
    const parts: Array<Buffer> = [
      Buffer.from("S"),
      u32(id),
      u32(options.outlive === true ? 1 : 0),
      ...field(file),
      u32(argv.length),
      ...argv.flatMap(field),
      u32(env.length),
      ...env.flatMap(field),
      u32(options.stdio.length)
    ]
    for (const spec of options.stdio) {
      if (spec === "ignore") parts.push(Buffer.from("n"), ...field(""))
      else if (spec === "in") parts.push(Buffer.from("i"), ...field(""))
      else if (spec === "out") parts.push(Buffer.from("o"), ...field(""))
      else if ("data" in spec) parts.push(Buffer.from("d"), ...field(spec.data))
      else if ("append" in spec) parts.push(Buffer.from("a"), ...field(spec.append))
      else if ("truncate" in spec) parts.push(Buffer.from("t"), ...field(spec.truncate))
      else parts.push(Buffer.from("s"), ...field(String(spec.sameAs)))
    }
    return new Promise<Spawned>((resolve, reject) => {
      this.#pending.set(id, { resolve, reject, stdio: options.stdio })
      this.updateRef()
      this.#send(parts)
    })
  }

  /**
   * A request that starts no program ('N', 'A', 'L'): done (`D`) or failed (`E`). Aborted: the
   * spawner's child doing it is killed (the caller undoes what it may have done).
   */
  task(
    kind: "N" | "A" | "L" | "P",
    fields: ReadonlyArray<Buffer>,
    signal: AbortSignal | undefined
  ): Promise<string | undefined> {
    if (this.dead) return Promise.reject(new SpawnerLost())
    const id = this.#nextId++
    return new Promise<string | undefined>((resolve, reject) => {
      const onAbort = () => {
        if (!this.#tasks.delete(id)) return
        this.#send([Buffer.from("K"), u32(id), u32(9), u32(0)])
        this.updateRef()
        reject(signal?.reason instanceof Error ? signal.reason : new Error("aborted"))
      }
      const settle = () => signal?.removeEventListener("abort", onAbort)
      this.#tasks.set(id, {
        resolve: (result) => (settle(), resolve(result)),
        reject: (e) => (settle(), reject(e))
      })
      this.updateRef()
      this.#send([Buffer.from(kind), u32(id), ...fields])
      if (signal?.aborted === true) onAbort()
      else signal?.addEventListener("abort", onAbort, { once: true })
    })
  }

  kill(id: number, pid: number, signal: number, group: boolean): void {
    if (this.dead) {
      // Not started by a live spawner any more: what is left of it is signalled directly.
      try {
        process.kill(group ? -pid : pid, signal)
      } catch {
        // Gone.
      }
      return
    }
    this.#send([Buffer.from("K"), u32(id), u32(signal), u32(group ? 1 : 0)])
  }

  stop(): void {
    this.child.stdin!.end()
  }

  #onData(text: string): void {
    this.#buffer += text
    let at: number
    while ((at = this.#buffer.indexOf("\n")) >= 0) {
      const line = this.#buffer.slice(0, at)
      this.#buffer = this.#buffer.slice(at + 1)
      this.#answer(line)
    }
  }

  #answer(line: string): void {
    const [kind, idText, ...rest] = line.split(" ")
    const id = Number(idText)
    if (kind === "S") {
      const pending = this.#pending.get(id)
      if (pending === undefined) return
      this.#pending.delete(id)
      const pid = Number(rest[0])
      const fds = rest.slice(1).map(Number)
      const stdio: Array<Net.Socket | null> = []
      let failure: Error | undefined
      for (let i = 0; i < pending.stdio.length; i++) {
        const spec = pending.stdio[i]
        const fd = fds[i] ?? -1
        if (fd < 0 || (spec !== "in" && spec !== "out") || failure !== undefined) {
          stdio.push(null)
          continue
        }
        try {
          const own = FsSync.openSync(
            `/proc/${this.pid}/fd/${fd}`,
            spec === "in" ? FsSync.constants.O_WRONLY : FsSync.constants.O_RDONLY
          )
          const socket = new Net.Socket({ fd: own, readable: spec === "out", writable: spec === "in" })
          stdio.push(socket)
        } catch (e) {
          failure = e instanceof Error ? e : new Error(String(e))
          stdio.push(null)
        }
      }
      this.#send([Buffer.from("O"), u32(id)])
      const spawned = new Spawned(this, id, pid, stdio)
      this.#children.set(id, spawned)
      spawned.once("exit", () => {
        this.#children.delete(id)
        this.updateRef()
      })
      if (failure !== undefined) {
        this.kill(id, pid, 9, true)
        for (const socket of stdio) socket?.destroy()
        // Its descriptors are gone with it when the spawner died between its answer and here.
        pending.reject(
          (failure as NodeJS.ErrnoException).code === "ENOENT"
            ? new SpawnerLost()
            : new SpawnFailed(0, `opening the command's pipes: ${failure.message}`)
        )
      } else {
        pending.resolve(spawned)
      }
      this.updateRef()
    } else if (kind === "E") {
      const failed = new SpawnFailed(Number(rest[0]), rest.slice(1).join(" "))
      const pending = this.#pending.get(id) ?? this.#tasks.get(id)
      if (pending === undefined) return
      this.#pending.delete(id)
      this.#tasks.delete(id)
      pending.reject(failed)
      this.updateRef()
    } else if (kind === "D") {
      const task = this.#tasks.get(id)
      if (task === undefined) return
      this.#tasks.delete(id)
      task.resolve(rest[0])
      this.updateRef()
    } else if (kind === "X") {
      const spawned = this.#children.get(id)
      if (spawned === undefined) return
      const status = Number(rest[0])
      // A wait status: exited (code in bits 8-15) or killed (signal in bits 0-6).
      if ((status & 0x7f) === 0) spawned.exited((status >> 8) & 0xff, null)
      else spawned.exited(null, signalNames.get(status & 0x7f) ?? "SIGKILL")
    }
  }

  #lost(): void {
    if (this.dead) return
    this.dead = true
    for (const pending of [...this.#pending.values(), ...this.#tasks.values()]) pending.reject(new SpawnerLost())
    this.#pending.clear()
    this.#tasks.clear()
    const children = [...this.#children.values()]
    this.#children.clear()
    for (const child of children) child.exited(null, "SIGKILL", new SpawnerLost())
    this.child.stdout?.destroy()
    this.child.stdin?.destroy()
  }
}

// ---------------------------------------------------------------------------------------------
// One spawner per agent process: every driver of the process (tests start several) shares it.

/** The binaries of the drivers using the spawner (one each; the same program, in each one's data dir). */
const binaries: Array<string> = []
/** The last one released: a command still ending after its driver stopped (an interrupted create's teardown) gets a spawner too. */
let lastBinary: string | undefined
let client: Client | undefined
let starts = 0

const current = (): Client => {
  // The latest driver's copy: an earlier driver's data dir may be gone with it.
  const binary = binaries.at(-1) ?? lastBinary
  if (binary === undefined) throw new Error("no process spawner: the driver has not started")
  if (client === undefined || client.dead) {
    client = new Client(binary)
    starts++
  }
  return client
}

/** Starts `file args` through the spawner (a new spawner if the last one died). */
export const spawn = (file: string, args: ReadonlyArray<string>, options: SpawnOptions): Promise<Spawned> => {
  try {
    return current().spawn(file, args, options)
  } catch (e) {
    return Promise.reject(e)
  }
}

const report = (kind: "N" | "A" | "L" | "P", fields: ReadonlyArray<Buffer>, signal?: AbortSignal) => {
  try {
    return current().task(kind, fields, signal)
  } catch (e) {
    return Promise.reject(e)
  }
}

const task = (kind: "N" | "A" | "L", fields: ReadonlyArray<Buffer>, signal?: AbortSignal): Promise<void> =>
  report(kind, fields, signal).then(() => undefined)

/**
 * Moves bytes from this process's descriptor `from` to its descriptor `to` (a connection and a
 * command's pipe, either way) until end of file on `from`, in a child of the spawner that took
 * both with pidfd_getfd(2): the kernel splices them, no byte passes through this process. This
 * process must neither read `from` nor write `to` meanwhile. Resolves with the bytes moved;
 * fails (`SpawnFailed`, with the errno) on a reset connection, a reader gone, or `idleMs` (0: no
 * bound) with nothing moved (ETIMEDOUT). Aborted: the child is killed.
 */
export const splice = (from: number, to: number, idleMs: number, signal?: AbortSignal): Promise<number> =>
  report("P", [u32(from), u32(to), u32(idleMs)], signal).then((moved) => Number(moved ?? "0"))

/**
 * Makes a sandbox's veth pair and sets both ends up by rtnetlink, from the spawner: no `ip`
 * started. Fails (`SpawnFailed`, the step and the kernel's reason) when a step fails, with what
 * the steps before it made left in place (the run's teardown removes the pair).
 */
export const veth = (request: VethRequest, signal?: AbortSignal): Promise<void> =>
  task("N", [
    u32(request.pid),
    ...field(String(request.startTicks)),
    ...field(request.bridge),
    ...field(request.hostEnd),
    ...field(request.mac),
    ...field(request.ip),
    u32(request.prefix),
    ...field(request.gateway ?? "")
  ], signal)

/**
 * Removes the host's network interface `name` (a sandbox's veth host end, whose peer goes with
 * it) by rtnetlink, from the spawner: no `ip` started (~1.7 ms of CPU each, and a fork). One
 * gone already (the kernel removes a veth with its peer's namespace) is done.
 */
export const unlink = (name: string, signal?: AbortSignal): Promise<void> => task("L", [...field(name)], signal)

/** Sets an adopted sandbox's hostname and /dev/shm's size from the spawner: no program started. */
export const adoptInside = (request: AdoptRequest, signal?: AbortSignal): Promise<void> =>
  task("A", [
    u32(request.pid),
    ...field(String(request.startTicks)),
    ...field(request.hostname),
    ...field(String(request.shmBytes))
  ], signal)

/** A driver starts using the spawner built at `path`; `release` when it stops (the last one ends it). */
export const use = (path: string): { readonly release: () => void } => {
  binaries.push(path)
  let released = false
  return {
    release: () => {
      if (released) return
      released = true
      binaries.splice(binaries.lastIndexOf(path), 1)
      lastBinary = path
      if (binaries.length === 0 && client !== undefined) {
        client.stop()
        client = undefined
      }
    }
  }
}

/** The running spawner's pid (undefined when none runs) and how many were started: for tests. */
export const status = (): { readonly pid: number | undefined; readonly starts: number } => ({
  pid: client !== undefined && !client.dead ? client.pid : undefined,
  starts
})
