/**
 * The data plane's side of a spliced file transfer (`SPLICE_PROTOCOL` of
 * `@svc/host-protocol/DataPlane`): the request's connection taken from the HTTP server once
 * the transfer can start (`101` written by hand: the framework's upgrade would read the
 * connection), its bytes then moved by the driver's splice, and the connection ended here, so
 * that the framework finds it closed and writes nothing more on it.
 */
import * as NodeHttpServerRequest from "@effect/platform-node/NodeHttpServerRequest"
import { SPLICE_MIN_BYTES, SPLICE_PROTOCOL, SPLICE_SIZE_HEADER } from "@svc/host-protocol/DataPlane"
import { Effect } from "effect"
import type { HttpServerRequest } from "effect/http"
import type { EventEmitter } from "node:events"
import type * as Net from "node:net"

/** The request asks for its transfer spliced (`Upgrade: svc-splice`). */
export const wantsSplice = (request: HttpServerRequest.HttpServerRequest): boolean =>
  (request.headers["upgrade"] ?? "").toLowerCase() === SPLICE_PROTOCOL

/** A file of this size is worth a splice (smaller ones go plainly, see `SPLICE_MIN_BYTES`). */
export const worthSplicing = (size: number | null): size is number => size !== null && size >= SPLICE_MIN_BYTES

/** The request's connection (an upgrade request's: the HTTP server no longer parses it). */
export const connectionOf = (request: HttpServerRequest.HttpServerRequest): Net.Socket =>
  NodeHttpServerRequest.toIncomingMessage(request).socket as Net.Socket

/**
 * An upgrade request answered plainly (a refusal, a listing, a small file) is written by a
 * `ServerResponse` the framework puts on the connection; the HTTP server no longer tells it when
 * the connection drained (it let go of an upgrade request's connection), so a body past one
 * buffer would wait for ever. This does what the server does for its own connections.
 */
export const forwardDrain = (socket: Net.Socket): void => {
  socket.on("drain", () => (socket as unknown as { readonly _httpMessage?: EventEmitter })._httpMessage?.emit("drain"))
}

/** Answers the request `101`: from here on the connection carries the transfer's bytes. */
export const switchProtocols = (socket: Net.Socket, size?: number): void => {
  socket.write(
    `HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: ${SPLICE_PROTOCOL}\r\n` +
      (size !== undefined ? `${SPLICE_SIZE_HEADER}: ${size}\r\n` : "") + "\r\n",
    "latin1"
  )
}

/**
 * Ends the connection (after `line`, if any) and waits until the API closed its side too: read
 * again, so that its end is seen, what it still sends is dropped. The bytes still in the
 * kernel's buffers may take a slow client a while; past `waitMs` the connection is destroyed
 * (the transfer's idle bound: by then nothing moved for as long).
 */
export const endConnection = (socket: Net.Socket, waitMs: number, line?: string): Effect.Effect<void> =>
  Effect.callback<void>((resume) => {
    if (socket.destroyed) return resume(Effect.void)
    const timer = setTimeout(() => socket.destroy(), waitMs)
    socket.once("close", () => {
      clearTimeout(timer)
      resume(Effect.void)
    })
    socket.on("data", () => undefined)
    socket.resume()
    if (line !== undefined) socket.end(line + "\n")
    else socket.end()
  })

/** A transfer that failed after the `101`: the connection is reset, so the API never takes it for a whole one. */
export const resetConnection = (socket: Net.Socket): Effect.Effect<void> =>
  Effect.callback<void>((resume) => {
    if (socket.destroyed) return resume(Effect.void)
    socket.once("close", () => resume(Effect.void))
    socket.resetAndDestroy()
  })
