/**
 * The terminal WebSocket (docs/contract.md#terminal): `GET /terminal?token=&sandbox_id=&cols=&rows=`.
 *
 * An endpoint of the API like any other, so the Authorization middleware checks the key (from
 * `?token=`, allowed on this path only, or the header) exactly as it checks a header key:
 * `sandboxes:write`, expiry, revocation, the failed-credential limit; then this handler applies
 * the single-sandbox policy, the sandbox's state (409 unless running) and opens the terminal on
 * the sandbox's host, all before the upgrade: every refusal is the contract's JSON answer. The
 * WebSocket is Effect's own upgrade of the request (`request.upgrade`, `ws` underneath), which
 * keeps this inside the API's middleware (request id, error bodies) rather than beside it.
 *
 * Once open: binary frames are terminal bytes both ways; text frames are JSON control messages
 * (`TerminalResize` from the client, others ignored; `TerminalExit` from the server, last, both
 * in @svc/domain/Api/Terminal). The credential is checked again every `RECHECK_MS`: revoked or
 * expired, the terminal closes (close code 4401). A session cookie needs an `Origin` of this server (a
 * page of another origin, a sandbox's preview included, cannot open a terminal with it).
 */
import * as NodeSocket from "@effect/platform-node/NodeSocket"
import { ApiKeys } from "@svc/auth/ApiKeys"
import { sandboxPolicy } from "@svc/auth/Authorization"
import { Sessions } from "@svc/auth/Sessions"
import { Api } from "@svc/domain/Api"
import { CsrfRejected, CurrentPrincipal, type Principal, SESSION_COOKIE } from "@svc/domain/Api/Auth"
import { TerminalExitJson, TerminalResizeJson } from "@svc/domain/Api/Terminal"
import * as Errors from "@svc/domain/Errors"
import { Processes, PtyFrames } from "@svc/sandboxes/Processes"
import { Sandboxes } from "@svc/sandboxes/Sandboxes"
import { Effect, Option, Result, Schedule, Schema } from "effect"
import type { HttpServerRequest } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"
import * as Socket from "effect/socket/Socket"
import { sameOrigin } from "./Authorization.ts"
import { queryToken } from "./Middleware.ts"

/** How often an open terminal's credential is checked again. */
export const RECHECK_MS = 1_000
/** The close code of a terminal whose credential was revoked or expired. */
export const CLOSE_UNAUTHENTICATED = 4401
const DEFAULT_COLS = 80
const DEFAULT_ROWS = 24

const BEARER = /^Bearer[ \t]+([^\s]+)[ \t]*$/i

const isWebSocketUpgrade = (request: HttpServerRequest.HttpServerRequest) =>
  request.headers["upgrade"]?.toLowerCase() === "websocket" &&
  /(?:^|,)\s*upgrade\s*(?:,|$)/i.test(request.headers["connection"] ?? "")

/** A client's text frame: a resize, or nothing (any other message is ignored). */
const decodeResize = Schema.decodeUnknownOption(TerminalResizeJson)
const encodeExit = Schema.encodeSync(TerminalExitJson)

export const TerminalGroup = HttpApiBuilder.group(
  Api,
  "terminal",
  Effect.fn(function*(handlers) {
    const processes = yield* Processes
    const sandboxes = yield* Sandboxes
    const keys = yield* ApiKeys
    const sessions = yield* Sessions

    /** Whether the request's credential still lets in (false only when it is refused). */
    const stillValid = (request: HttpServerRequest.HttpServerRequest, principal: Principal) => {
      let check: Effect.Effect<Principal, unknown>
      if (principal.credential.type === "session") {
        check = sessions.verify(request.cookies[SESSION_COOKIE] ?? "")
      } else {
        const header = BEARER.exec(request.headers["authorization"] ?? "")
        const token = header?.[1] ?? queryToken(request.url) ?? ""
        check = keys.verify(token)
      }
      return Effect.map(Effect.result(check), (result) =>
        // A database that cannot answer is not a refusal: the terminal stays open.
        Result.isSuccess(result) || !(result.failure instanceof Errors.Unauthenticated))
    }

    return handlers.handle("open", ({ query, request }) =>
      Effect.gen(function*() {
        const principal = yield* CurrentPrincipal
        // Cross-site WebSocket hijacking: a browser sends the cookie with any page's handshake.
        if (principal.credential.type === "session" && !sameOrigin(request)) return yield* new CsrfRejected()
        if (!isWebSocketUpgrade(request)) {
          return yield* new Errors.InvalidRequest({ error: "The terminal is a WebSocket: send Upgrade: websocket" })
        }
        const sandbox = yield* sandboxes.get(principal.orgId, query.sandbox_id)
        yield* sandboxPolicy({ id: sandbox.id, parentId: sandbox.parentId })
        const cols = query.cols === undefined ? DEFAULT_COLS : Number(query.cols)
        const rows = query.rows === undefined ? DEFAULT_ROWS : Number(query.rows)
        // The terminal runs on the host before the client is told yes.
        const upstream = yield* Effect.acquireRelease(
          processes.pty(principal.orgId, sandbox.id, cols, rows).pipe(
            Effect.catchTag("PayloadTooLarge", () => Effect.fail(new Errors.Unavailable()))
          ),
          (socket) => Effect.sync(() => socket.destroy())
        )
        const client = yield* request.upgrade.pipe(
          Effect.mapError(() => new Errors.InvalidRequest({ error: "The WebSocket upgrade failed" }))
        )
        const host = yield* NodeSocket.fromDuplex(Effect.succeed(upstream))
        yield* relay(client, host, stillValid(request, principal)).pipe(Effect.ignore)
      }).pipe(Effect.scoped))
  })
)

/**
 * The client's WebSocket and the host's terminal, until one ends: the terminal's exit code as
 * the last message, a close code that says why otherwise.
 */
const relay = (client: Socket.Socket, host: Socket.Socket, stillValid: Effect.Effect<boolean>) =>
  Effect.gen(function*() {
    const toClient = yield* client.writer
    const fromClient = yield* client.reader
    const toHost = yield* host.writer
    const fromHost = yield* host.reader

    const keys = Effect.gen(function*() {
      while (true) {
        for (const message of yield* fromClient.pull) {
          if (typeof message === "string") {
            const resize = decodeResize(message)
            if (Option.isSome(resize)) {
              const { cols, rows } = resize.value
              yield* toHost.write(PtyFrames.encode({ type: PtyFrames.RESIZE, cols, rows }))
            }
          } else {
            yield* toHost.write(PtyFrames.encode({ type: PtyFrames.DATA, bytes: message }))
          }
        }
      }
    })

    const decoder = new PtyFrames.Decoder()
    const screen = Effect.gen(function*() {
      while (true) {
        const chunks = yield* fromHost.pull.pipe(
          // The host went without an exit: the terminal is gone.
          Effect.catch(() => Effect.succeed(undefined))
        )
        if (chunks === undefined) {
          return yield* toClient.write(new Socket.CloseEvent(1011, "the terminal's host went away"))
        }
        for (const chunk of chunks) {
          for (const frame of decoder.push(typeof chunk === "string" ? Buffer.from(chunk) : chunk)) {
            if (frame.type === PtyFrames.DATA) yield* toClient.write(frame.bytes)
            else if (frame.type === PtyFrames.EXIT) {
              yield* toClient.write(encodeExit({ type: "exit", code: frame.code }))
              return yield* toClient.write(new Socket.CloseEvent(1000, "exited"))
            }
          }
        }
      }
    })

    const revoked = stillValid.pipe(
      Effect.repeat({ schedule: Schedule.spaced(RECHECK_MS), while: (valid) => valid }),
      Effect.andThen(toClient.write(new Socket.CloseEvent(CLOSE_UNAUTHENTICATED, "the key was revoked or expired")))
    )

    // Whichever ends first ends the terminal (the scope hangs it up on the host).
    yield* Effect.raceAll([screen, Effect.andThen(Effect.ignore(keys), Effect.void), revoked])
  })
