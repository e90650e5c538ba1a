/**
 * `sandbox.terminal()`: a PTY in a sandbox over the `/terminal` WebSocket (docs/contract.md#terminal):
 * binary frames are the terminal's bytes both ways; text frames are JSON control messages,
 * `TerminalResize` out and `TerminalExit` in (the API's schemas, @svc/domain/Api/Terminal). The key travels in
 * `?token=`, the one place the API accepts it in a URL (browsers cannot set a WebSocket's
 * headers; the API's logs redact it).
 */
import { TerminalExitJson, TerminalResizeJson } from "@svc/domain/Api/Terminal"
import { Option, Schema } from "effect"
import { type Http, segment, SvcError, type WebSocketLike } from "./Http.ts"

export interface TerminalOptions {
  /** Its size (default 80 x 24). */
  readonly cols?: number | undefined
  readonly rows?: number | undefined
}

const encoder = new TextEncoder()
const decodeExit = Schema.decodeUnknownOption(TerminalExitJson)
const encodeResize = Schema.encodeOption(TerminalResizeJson)

/** An open terminal. `exited` resolves with the shell's exit code. */
export class Terminal {
  readonly #socket: WebSocketLike
  readonly #listeners = new Set<(data: Uint8Array) => void>()
  /** What arrived before anyone listened: given to the first listener. */
  #early: Array<Uint8Array> = []
  /** Resolves with the shell's exit code once it ended; rejects with a SvcError if the connection closed first. */
  readonly exited: Promise<number>

  /** @internal use `sandbox.terminal()` */
  constructor(socket: WebSocketLike) {
    this.#socket = socket
    let exitCode: number | undefined
    this.exited = new Promise<number>((resolve, reject) => {
      socket.addEventListener("message", (event: { data: unknown }) => {
        if (typeof event.data === "string") {
          // Any other text is not a control message of this contract: ignored, as the server ignores unknown ones.
          const exit = decodeExit(event.data)
          if (Option.isSome(exit)) exitCode = exit.value.code
          return
        }
        const bytes = event.data instanceof ArrayBuffer
          ? new Uint8Array(event.data)
          : new Uint8Array(event.data as Uint8Array)
        if (this.#listeners.size === 0) this.#early.push(bytes)
        else for (const listener of this.#listeners) listener(bytes)
      })
      socket.addEventListener("close", (event: { code?: number; reason?: string }) => {
        if (exitCode !== undefined) return resolve(exitCode)
        reject(
          new SvcError({
            status: 0,
            code: event.code === 4401 ? "unauthenticated" : "terminal_closed",
            message: `the terminal closed before its shell exited (${event.code ?? "no code"}${
              event.reason ? ` ${event.reason}` : ""
            })`,
            details: { close_code: event.code, reason: event.reason }
          })
        )
      })
    })
    // Its failure reaches whoever awaits it; this only keeps it from being "unhandled".
    this.exited.catch(() => undefined)
  }

  /** Sends keys (text as UTF-8, or bytes) to the terminal. */
  write(data: string | Uint8Array): void {
    this.#socket.send(typeof data === "string" ? encoder.encode(data) : data)
  }

  /** Tells the PTY its new size (1 to 1000 each; the server would ignore any other). */
  resize(cols: number, rows: number): void {
    const message = encodeResize({ type: "resize", cols, rows })
    if (Option.isSome(message)) this.#socket.send(message.value)
  }

  /** Calls `listener` with the terminal's bytes as they come; returns the unsubscribe. */
  onData(listener: (data: Uint8Array) => void): () => void {
    this.#listeners.add(listener)
    const early = this.#early
    this.#early = []
    for (const bytes of early) listener(bytes)
    return () => this.#listeners.delete(listener)
  }

  /** Closes it (the shell is ended by the server). */
  close(): void {
    this.#socket.close(1000, "closed by the client")
  }
}

/**
 * Why a terminal's WebSocket did not open, as the API would have answered the handshake: a
 * WebSocket that fails to open says nothing of why. The same request over plain HTTP gets the
 * credential's and the query's refusals (401, 403, 400); past those (the API then asks for the
 * upgrade), the sandbox's record tells a missing sandbox (404) from one that is not running
 * (409 `conflict`, the API's answer to a terminal on it).
 */
const whyNotOpened = async (http: Http, sandboxId: string, query: Record<string, string | number>) => {
  try {
    const response = await http.request("GET", "/terminal", { query })
    await response.body?.cancel()
  } catch (error) {
    if (!(error instanceof SvcError) || error.status !== 400 || !/websocket/i.test(error.message)) return error
  }
  try {
    const record = await http.json<{ readonly state: string }>("GET", `/v1/sandboxes/${segment(sandboxId)}`)
    if (record.state !== "running") {
      return new SvcError({
        status: 409,
        code: "conflict",
        message: `sandbox ${sandboxId} is ${record.state}: a terminal needs it running`,
        details: { state: record.state }
      })
    }
  } catch (error) {
    return error
  }
  return new SvcError({ status: 0, code: "network_error", message: "the terminal's WebSocket could not be opened" })
}

/**
 * Opens a terminal in a sandbox; resolves once open. A refusal (the sandbox is not running, the
 * key may not write it, it does not exist) is thrown as a SvcError (see `whyNotOpened`).
 */
export const openTerminal = (http: Http, sandboxId: string, options: TerminalOptions = {}): Promise<Terminal> => {
  const query = { sandbox_id: sandboxId, cols: options.cols ?? 80, rows: options.rows ?? 24 }
  return new Promise<Terminal>((resolve, reject) => {
    const socket = http.openSocket("/terminal", query)
    socket.binaryType = "arraybuffer"
    // Made before `open` so that no early frame is missed.
    const terminal = new Terminal(socket)
    let opened = false
    socket.addEventListener("open", () => {
      opened = true
      resolve(terminal)
    })
    socket.addEventListener("error", () => {
      if (!opened) whyNotOpened(http, sandboxId, query).then(reject, reject)
    })
  })
}
