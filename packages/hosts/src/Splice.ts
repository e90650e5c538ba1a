/**
 * The API's kernel splice of a file's bytes between two of its connections (`native/svc-splice.c`:
 * splice through a pipe of its own), started once per transfer with both connections inherited,
 * so that the bytes never pass through the API's event loop: a spliced download's
 * (`SPLICE_PROTOCOL`) from the host's connection to the client's (`HostBytes.spliceInto`), and an
 * upload's body of declared length from the client's to the host's (`spliceBody`). Read and
 * written by Node, each GiB costs the API about 3 CPU-seconds, most of it in its socket calls (a
 * chunked upload, which still goes that way: 2.9; spliced, 0.05; bench/README.md, "Spliced in
 * the API too, 2026-11-28 13:57").
 *
 * Only between plain HTTP/1 sockets: a TLS connection at either end (an `https` host, a client
 * of a TLS listener), an HTTP/2 stream or a chunked upload (its framing is the Node parser's) is
 * moved by Node as before. A spliced transfer's response closes its connection.
 */
import { descriptorOf, stopReading, written } from "@svc/host-protocol/Handoff"
import * as TransferIdle from "@svc/host-protocol/TransferIdle"
import * as Native from "@svc/host/Driver/Native"
import { Effect, Schema, type Scope } from "effect"
import { spawn } from "node:child_process"
import * as Fs from "node:fs/promises"
import type * as Http from "node:http"
import type * as Net from "node:net"
import * as Os from "node:os"
import * as NodePath from "node:path"
import { Readable } from "node:stream"
import { fileURLToPath } from "node:url"

const NATIVE_DIR = fileURLToPath(new URL("../native/", import.meta.url))

/** errno values the splicer reports (`svc-splice.c`). */
export const EPIPE = 32
export const ECONNRESET = 104
export const ETIMEDOUT = 110

/**
 * The splicer ended before every byte was moved: `errno` says why, `side` where (see
 * `svc-splice.c`): `from` the source ended or failed, `to` the destination's reader went, `-`
 * neither (nothing moved for the idle bound, or the splicer itself).
 */
export class SplicerFailed extends Schema.TaggedError<SplicerFailed>()("SplicerFailed", {
  errno: Schema.Number,
  side: Schema.Literals(["from", "to", "-"]),
  message: Schema.String
}) {}

/** Where the splicer's binary is, once built; undefined before, or on a host without a C compiler. */
export type SpliceBinary = () => string | undefined

/**
 * Builds `svc-splice` into a folder of this process's own (0700, removed with the scope) in the
 * background: transfers before it is there, or on a machine that cannot build it (no `cc`; its
 * reason is logged), are moved by Node.
 */
export const build: Effect.Effect<SpliceBinary, never, Scope.Scope> = Effect.gen(function*() {
  let binary: string | undefined
  // The compiler is not interrupted with the scope: the folder goes once it is done with it (a
  // scope closed mid-build met ENOTEMPTY, a test's API closing within its first second).
  const { built } = yield* Effect.acquireRelease(
    Effect.promise(async () => {
      const dir = await Fs.mkdtemp(NodePath.join(Os.tmpdir(), "svc-api-native-"))
      const built = Native.build(dir, "svc-splice", NATIVE_DIR).then(
        (path) => void (binary = path),
        (cause: unknown) => cause
      )
      return { dir, built }
    }),
    ({ built, dir }) =>
      Effect.promise(() => built.then(() => Fs.rm(dir, { recursive: true, force: true }).catch(() => undefined)))
  )
  yield* Effect.promise(() => built).pipe(
    Effect.flatMap((cause) =>
      cause === undefined
        ? Effect.void
        : Effect.logWarning("api: no kernel splice for file transfers, Node moves their bytes", {
          cause: String(cause)
        })
    ),
    Effect.forkScoped
  )
  return () => binary
})

/**
 * Runs the splicer for `bytes` bytes from descriptor `from` to `to` (Node neither reads `from`
 * nor writes `to` meanwhile), at most `idleMs` without a byte moved. Resolves once all moved;
 * rejects with `SplicerFailed`; an abort kills it.
 */
const run = (binary: string, from: number, to: number, bytes: number, idleMs: number, signal: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    // Descriptors 3 and 4: libuv makes a child's 0-2 blocking, which would change the API's own
    // sockets (one open file each, shared with the child).
    const child = spawn(binary, [String(bytes), String(idleMs)], {
      stdio: ["ignore", "pipe", "ignore", from, to],
      signal,
      killSignal: "SIGKILL",
      env: {}
    })
    let answer = ""
    child.stdout!.setEncoding("utf8").on("data", (text: string) => (answer = (answer + text).slice(0, 512)))
    child.once("error", (e) => reject(new SplicerFailed({ errno: 0, side: "-", message: `the splicer: ${e.message}` })))
    child.once("close", (code) => {
      const line = answer.trim()
      if (code === 0 && line === `D ${bytes}`) return resolve()
      const failed = /^E (\d+) (from|to|-) (.*)$/.exec(line)
      reject(
        failed !== null
          ? new SplicerFailed({ errno: Number(failed[1]), side: failed[2] as "from" | "to" | "-", message: failed[3]! })
          : new SplicerFailed({
            errno: 0,
            side: "-",
            message: `the splicer ended (${code}) with ${JSON.stringify(line)}`
          })
      )
    })
  })

/** A plain (not TLS) socket with a descriptor. */
const plainSocket = (socket: Net.Socket | null | undefined): socket is Net.Socket =>
  socket != null && (socket as { encrypted?: boolean }).encrypted !== true && descriptorOf(socket) !== undefined

/** A client's connection, for a splice into or out of it: its response (closed after) and the transfer's idle bound. */
export interface ClientConnection {
  readonly response: Http.ServerResponse
  readonly idleMs: number
}

/**
 * A spliced download's bytes (the host's switched connection, `head` read with its answer):
 * exactly `size` of them, then the end (nothing past them is passed on); a connection that
 * ends or resets before (the host's read failed) destroys the stream, so its reader never sees
 * a whole file that is not. Read as any stream, Node reads them; handed to a client's response
 * first (`spliceInto`), the kernel moves them, and this stream carries none: it ends once all
 * moved.
 */
export class HostBytes extends Readable {
  #received = 0
  #started = false
  #splicer: { readonly binary: string; readonly client: ClientConnection } | undefined
  readonly #abort = new AbortController()
  readonly #socket: Net.Socket
  readonly #head: Buffer
  readonly #size: number
  readonly #binary: SpliceBinary

  constructor(socket: Net.Socket, head: Buffer, size: number, binary: SpliceBinary) {
    // A few socket reads ahead, not one: the connection is not paused and resumed at each chunk.
    super({ highWaterMark: 1024 * 1024 })
    this.#socket = socket
    this.#head = head
    this.#size = size
    this.#binary = binary
    socket.pause()
    socket.once("error", (e) => this.destroy(e))
  }

  /**
   * The bytes to go to the client's connection by the kernel, if both connections allow it
   * (plain sockets, HTTP/1) and the splicer is built; called before the stream is read. Sets the
   * response's length, and closes its connection after it (the server must not read a next
   * request into the middle of the bytes). False: the stream carries the bytes itself.
   */
  spliceInto(client: ClientConnection): boolean {
    const { response } = client
    const binary = this.#binary()
    if (binary === undefined || this.#started || response.headersSent) return false
    if (response.req.httpVersionMajor !== 1 || !plainSocket(response.socket) || !plainSocket(this.#socket)) {
      return false
    }
    this.#splicer = { binary, client }
    response.setHeader("content-length", String(this.#size))
    response.setHeader("connection", "close")
    return true
  }

  override _read(): void {
    if (this.#started) {
      this.#socket.resume()
      return
    }
    this.#started = true
    if (this.#splicer !== undefined) this.#spliced(this.#splicer)
    else this.#carried()
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.#abort.abort()
    this.#socket.destroy()
    callback(error)
  }

  /** Node reads the bytes: they pass through this stream. */
  #carried() {
    const socket = this.#socket
    const take = (data: Buffer) => {
      if (this.destroyed || this.#received === this.#size) return
      // Past the size (a host's bug) nothing is passed on, as the splicer reads nothing past it.
      const chunk = data.length > this.#size - this.#received ? data.subarray(0, this.#size - this.#received) : data
      this.#received += chunk.length
      const more = this.push(chunk)
      if (this.#received === this.#size) {
        this.push(null)
        // The host ends its side once every byte is sent: nothing more to read.
        socket.destroy()
      } else if (!more) {
        socket.pause()
      }
    }
    const cut = () => {
      if (this.#received < this.#size) {
        this.destroy(new Error(`the host's file transfer was cut after ${this.#received} of ${this.#size} bytes`))
      }
    }
    if (this.#head.length > 0) take(this.#head)
    // Reset before the first read (its error destroyed this stream already), or ended with it.
    if (socket.destroyed) return cut()
    socket.on("data", take)
    socket.once("end", cut)
    socket.once("close", cut)
    socket.resume()
  }

  /**
   * The kernel moves the bytes: called by the response's pipe, so after the framework wrote
   * the response's head into it. The head goes out first, then what Node had read ahead of
   * the host's connection, then the splicer moves the rest.
   */
  #spliced(splicer: { readonly binary: string; readonly client: ClientConnection }) {
    const { response } = splicer.client
    const client = response.socket!
    const ahead: Array<Buffer> = []
    let aheadBytes = 0
    for (const chunk of [this.#head, ...stopReading(this.#socket)]) {
      const taken = chunk.subarray(0, this.#size - aheadBytes)
      if (taken.length > 0) ahead.push(taken)
      aheadBytes += taken.length
    }
    // Its bytes do not pass through the response: its length is the splicer's to keep.
    response.strictContentLength = false
    response.flushHeaders()
    const from = descriptorOf(this.#socket)
    const to = descriptorOf(client)
    const done = TransferIdle.movingOutside(client)
    written(client, ahead)
      .then(() => {
        if (aheadBytes === this.#size) return
        if (from === undefined || to === undefined) throw new Error("a connection closed before the splice")
        return run(splicer.binary, from, to, this.#size - aheadBytes, splicer.client.idleMs, this.#abort.signal)
      })
      .then(
        () => {
          done()
          this.#received = this.#size
          this.push(null)
          this.#socket.destroy()
        },
        (e: unknown) => {
          done()
          this.destroy(e instanceof Error ? e : new Error(String(e)))
        }
      )
  }
}

/**
 * Whether `body` (a client's upload) can go to the host's connection `host` by the kernel: a
 * plain HTTP/1.1 connection at both ends, a declared `Content-Length` (a chunked body's framing
 * is the Node parser's to read, and its place in it is not told), nothing of it read yet.
 */
export const canSpliceBody = (
  body: Readable,
  host: Net.Socket
): body is Http.IncomingMessage => {
  const request = body as Partial<Http.IncomingMessage>
  const length = request.headers?.["content-length"]
  return request.httpVersionMajor === 1 &&
    request.headers?.["transfer-encoding"] === undefined &&
    length !== undefined && /^\d{1,15}$/.test(length) && !body.readableDidRead && body.readableFlowing !== true &&
    plainSocket(request.socket) && plainSocket(host)
}

/**
 * Splices `request`'s body into the host's switched connection `host`: what Node had parsed of
 * it first, then the rest of its declared length by the kernel, from the client's connection
 * (which Node no longer reads: its parser is left in the middle of the body, so the response
 * closes the connection, `Connection: close`). Resolves once all moved; rejects with
 * `SplicerFailed` (`from`: the client's body was cut) or the error of a write to `host`.
 */
export const spliceBody = async (
  binary: string,
  request: Http.IncomingMessage,
  host: Net.Socket,
  client: ClientConnection,
  signal: AbortSignal
): Promise<void> => {
  const length = Number(request.headers["content-length"])
  client.response.setHeader("connection", "close")
  const socket = request.socket
  const ahead: Array<Buffer> = []
  const drain = () => {
    let chunk: Buffer | null
    while ((chunk = request.read() as Buffer | null) !== null) ahead.push(chunk)
  }
  drain()
  // Reading the body asks the socket for more: the server's `resume` listener, due on the next
  // tick, would start it reading again after it was stopped. Stopped after that tick (no read
  // from the connection comes between: the event loop polls only once the ticks are done).
  const tick = () => new Promise<void>((resolve) => process.nextTick(resolve))
  await tick()
  drain()
  ahead.push(...stopReading(socket))
  // Once more past a tick, should the drain above have scheduled another `resume`.
  await tick()
  drain()
  ahead.push(...stopReading(socket))
  const aheadBytes = ahead.reduce((n, c) => n + c.length, 0)
  if (aheadBytes > length) {
    throw new SplicerFailed({ errno: 0, side: "from", message: "the body ran past its Content-Length" })
  }
  await written(host, ahead)
  if (aheadBytes === length) return
  const from = descriptorOf(socket)
  const to = descriptorOf(host)
  if (from === undefined || to === undefined) {
    throw new SplicerFailed({ errno: 0, side: from === undefined ? "from" : "to", message: "a connection closed" })
  }
  const done = TransferIdle.movingOutside(socket)
  try {
    await run(binary, from, to, length - aheadBytes, client.idleMs, signal)
  } finally {
    done()
  }
}
