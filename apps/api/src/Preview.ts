/**
 * The preview proxy of exposed ports (docs/contract.md#exposed-ports), in front of the API's
 * routes: a request whose `Host` is `{port}-{sandbox_id}.{SVC_PREVIEW_DOMAIN}` never reaches
 * them; it goes, HTTP or WebSocket, to that port of the sandbox through a tunnel its agent opens
 * (`Previews.connect`). It is handled on the Node server itself (`makeNodeServer`), not as a
 * route: the bytes pass through as they are (an upgrade is the sandbox's to answer), with
 * nothing buffered.
 *
 * Let in: the preview token in `x-svc-preview-token` (for this sandbox and port, unexpired), or
 * a key in `Authorization` that may write this sandbox (`sandboxes:write`, the single-sandbox
 * policy). The platform's own credentials never reach the sandbox's server, whichever let the
 * request in (`platformCredential`): the preview token header, an `Authorization` bearer of the
 * platform's token form (`svc_...`: keys, preview tokens), and the dashboard's session cookie
 * (the request's other cookies are kept: they are the app's). Refusals are
 * the contract's errors: 401 without a credential that lets in, 403 for a key without the scope
 * or outside its sandbox, 404 for another org's sandbox or a port it does not expose, 409 when
 * it is not running, 502 when nothing answers on the port.
 *
 * Bounded per sandbox: at most `SVC_PREVIEW_CONNECTIONS_PER_SANDBOX` admitted requests and
 * WebSockets at once (one more is 429 `rate_limited` with `Retry-After`), and one whose tunnel
 * moves no byte for `SVC_PREVIEW_IDLE_TIMEOUT` is ended (502 if nothing was answered yet). The
 * Node server's own `headersTimeout` ends a request whose headers do not arrive in time.
 */
import { ApiKeys } from "@svc/auth/ApiKeys"
import { type Principal, SESSION_COOKIE } from "@svc/domain/Api/Auth"
import * as Errors from "@svc/domain/Errors"
import type { OrgId } from "@svc/domain/Ids"
import * as Scopes from "@svc/domain/Scopes"
import { parsePreviewHost, PREVIEW_TOKEN_HEADER, Previews, type PreviewTarget } from "@svc/sandboxes/Previews"
import { Cause, Context, Duration, Effect, FiberSet, Layer, Option } from "effect"
import * as Http from "node:http"
import type * as Net from "node:net"
import type { Duplex } from "node:stream"
import { PreviewConnectionsPerSandbox, PreviewIdleTimeout } from "./Config.ts"

/** What the Node server answers before the app (filled once the routes are built). */
export interface PreviewHandlers {
  /** True when the request was a preview request (and is handled). */
  readonly request: (request: Http.IncomingMessage, response: Http.ServerResponse) => boolean
  readonly upgrade: (request: Http.IncomingMessage, socket: Duplex, head: Buffer) => boolean
}

/** The holder the server reads and the preview layer fills. */
export class NodeHooks extends Context.Service<NodeHooks, { preview: PreviewHandlers | undefined }>()(
  "@svc/api/NodeHooks"
) {}

const BEARER = /^Bearer[ \t]+([^\s]+)[ \t]*$/i

/** Headers that belong to one connection (RFC 9110 7.6.1), never forwarded as they are. */
const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authenticate",
  "proxy-authorization",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade"
])

interface Admitted {
  readonly orgId: OrgId
  /** The credential's header: not forwarded. */
  readonly credential: string
}

/** A bearer of the platform's token form (`svc_live_` keys, `svc_pv_` preview tokens...). */
const PLATFORM_BEARER = /^[ \t]*Bearer[ \t]+svc_/i

/**
 * A request header without the platform's credentials in it: undefined to drop it whole, else
 * the value to forward. A `Cookie` loses the session cookie (any case, as a browser or a
 * client could send it) and keeps the rest; `Authorization` goes when it carries a platform
 * bearer; the preview token header always goes.
 */
export const platformCredential = (name: string, value: string): string | undefined => {
  switch (name) {
    case PREVIEW_TOKEN_HEADER:
      return undefined
    case "authorization":
      return PLATFORM_BEARER.test(value) ? undefined : value
    case "cookie": {
      const kept = value.split(";").filter((pair) => {
        const cookieName = pair.split("=", 1)[0]!.trim().toLowerCase()
        return cookieName !== SESSION_COOKIE && cookieName !== ""
      })
      return kept.length === 0 ? undefined : kept.map((pair) => pair.trim()).join("; ")
    }
    default:
      return value
  }
}

/**
 * `rawHeaders` without the connection's own, the credential, those `Connection` names, and the
 * platform's credentials (`platformCredential`).
 */
const forwardHeaders = (
  raw: ReadonlyArray<string>,
  drop: ReadonlySet<string>,
  keepUpgrade: boolean,
  scrub: (name: string, value: string) => string | undefined = (_, value) => value
) => {
  const named = new Set<string>()
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i]!.toLowerCase() === "connection") {
      for (const token of raw[i + 1]!.split(",")) named.add(token.trim().toLowerCase())
    }
  }
  const out: Array<[string, string]> = []
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase()
    if (drop.has(name)) continue
    const upgradeHeader = name === "connection" || name === "upgrade"
    if (keepUpgrade && upgradeHeader) {
      out.push([raw[i]!, raw[i + 1]!])
      continue
    }
    if (HOP_BY_HOP.has(name) || named.has(name)) continue
    const value = scrub(name, raw[i + 1]!)
    if (value !== undefined) out.push([raw[i]!, value])
  }
  return out
}

const errorResponse = (error: unknown) => {
  const { body, status } = Errors.errorBody(error)
  const text = JSON.stringify(body)
  const headers: Record<string, string> = {
    "content-type": "application/json; charset=utf-8",
    "content-length": String(Buffer.byteLength(text))
  }
  if (status === 401) headers["www-authenticate"] = "Bearer"
  if (error instanceof Errors.RateLimited) headers["retry-after"] = String(error.retry_after_s)
  return { status, headers, text }
}

const answerRefusal = (response: Http.ServerResponse, error: unknown) => {
  if (response.headersSent) return void response.destroy()
  const { headers, status, text } = errorResponse(error)
  response.writeHead(status, headers).end(text)
}

const refuseUpgrade = (socket: Duplex, error: unknown) => {
  const { headers, status, text } = errorResponse(error)
  let head = `HTTP/1.1 ${status} ${Http.STATUS_CODES[status] ?? "Error"}\r\nconnection: close\r\n`
  for (const [name, value] of Object.entries(headers)) head += `${name}: ${value}\r\n`
  socket.end(`${head}\r\n${text}`)
}

const UNAUTHENTICATED = new Errors.Unauthenticated({
  error: `A preview needs its token in ${PREVIEW_TOKEN_HEADER}, or a key allowed on the sandbox`
})

/** Fills `NodeHooks.preview` when the server has hooks (the API role's own server). */
export const PreviewProxyLayer = Layer.effectDiscard(Effect.gen(function*() {
  const hooks = yield* Effect.serviceOption(NodeHooks)
  if (Option.isNone(hooks)) return
  const previews = yield* Previews
  const keys = yield* ApiKeys
  const run = yield* FiberSet.makeRuntime<never, void, never>()
  const maxPerSandbox = yield* PreviewConnectionsPerSandbox
  const idleMs = Duration.toMillis(yield* PreviewIdleTimeout)
  /** Admitted requests and WebSockets open now, per sandbox (none: no entry). */
  const held = new Map<string, number>()

  /** One of the sandbox's connections, or 429 past its bound; the release runs once. */
  const charge = (sandboxId: string) =>
    Effect.suspend(() => {
      const n = held.get(sandboxId) ?? 0
      if (n >= maxPerSandbox) {
        return Effect.fail(
          new Errors.RateLimited({
            error: `The sandbox has ${maxPerSandbox} preview requests open, as many as it may; retry`,
            retry_after_s: 1
          })
        )
      }
      held.set(sandboxId, n + 1)
      let released = false
      return Effect.succeed(() => {
        if (released) return
        released = true
        const left = (held.get(sandboxId) ?? 1) - 1
        if (left === 0) held.delete(sandboxId)
        else held.set(sandboxId, left)
      })
    })

  /** A tunnel that moves no byte either way for the idle timeout is ended (and its request with it). */
  const idleEnds = (tunnel: Net.Socket) => tunnel.setTimeout(idleMs, () => tunnel.destroy())

  const principalOf = (token: string) => {
    const cached = keys.cached(token, Date.now())
    return cached !== undefined
      ? Effect.succeed(Option.some<Principal>(cached))
      : Effect.option(Effect.catchTag(keys.verify(token), "Unauthenticated", () => Effect.fail(undefined)))
  }

  const admit = Effect.fn("Preview.admit")(function*(request: Http.IncomingMessage, target: PreviewTarget) {
    const token = request.headers[PREVIEW_TOKEN_HEADER]
    if (typeof token === "string") {
      const orgId = yield* previews.verify(token, target)
      if (orgId !== undefined) return { orgId, credential: PREVIEW_TOKEN_HEADER } satisfies Admitted
    }
    const bearer = BEARER.exec(request.headers.authorization ?? "")
    if (bearer === null) return yield* UNAUTHENTICATED
    const principal = yield* principalOf(bearer[1]!)
    if (Option.isNone(principal)) return yield* UNAUTHENTICATED
    const { grant, orgId } = principal.value
    if (!Scopes.allows(grant, "sandboxes", "write")) {
      return yield* new Errors.InsufficientScope({
        error: "This key lacks the scope sandboxes:write",
        required_scope: "sandboxes:write"
      })
    }
    const sandbox = yield* previews.sandbox(orgId, target.sandboxId)
    if (Scopes.sandboxAccess(grant, { id: sandbox.id, parentId: sandbox.parentId })._tag === "Denied") {
      return yield* new Errors.SandboxOutOfScope()
    }
    return { orgId, credential: "authorization" } satisfies Admitted
  })

  /** The tunnel to the target for an admitted request, charged to its sandbox until `release`. */
  const open = (request: Http.IncomingMessage, target: PreviewTarget) =>
    Effect.flatMap(
      admit(request, target),
      (admitted) =>
        Effect.flatMap(charge(target.sandboxId), (release) =>
          previews.connect(admitted.orgId, target).pipe(
            Effect.map((tunnel) => ({ admitted, tunnel, release })),
            Effect.onExit((exit) => Effect.sync(() => exit._tag === "Failure" && release()))
          ))
    )

  const forwarded = (request: Http.IncomingMessage): Array<[string, string]> => [
    ["x-forwarded-for", request.socket.remoteAddress ?? ""],
    ["x-forwarded-host", request.headers.host ?? ""],
    ["x-forwarded-proto", "http"]
  ]

  const proxyRequest = (
    request: Http.IncomingMessage,
    response: Http.ServerResponse,
    admitted: Admitted,
    tunnel: Net.Socket,
    release: () => void
  ) => {
    idleEnds(tunnel)
    response.once("close", release)
    const headers = [
      ...forwardHeaders(
        request.rawHeaders,
        new Set([admitted.credential, "x-forwarded-for"]),
        false,
        platformCredential
      ),
      ...forwarded(request)
    ]
    const upstream = Http.request({
      method: request.method ?? "GET",
      path: request.url ?? "/",
      headers: headers.flat(),
      // No agent: the request goes on this tunnel, which is not reused (Node closes it after).
      createConnection: () => tunnel
    })
    const fail = () => {
      tunnel.destroy()
      answerRefusal(response, new Errors.BadGateway())
    }
    upstream.on("error", fail)
    upstream.on("response", (answer) => {
      const out = forwardHeaders(answer.rawHeaders, new Set(), false)
      response.writeHead(answer.statusCode ?? 502, answer.statusMessage, out.flat())
      answer.pipe(response)
      answer.on("error", () => response.destroy())
    })
    // The client went away before its answer: so does the tunnel.
    response.on("close", () => {
      if (!response.writableFinished) tunnel.destroy()
    })
    request.pipe(upstream)
  }

  const proxyUpgrade = (
    request: Http.IncomingMessage,
    socket: Duplex,
    head: Buffer,
    admitted: Admitted,
    tunnel: Net.Socket,
    release: () => void
  ) => {
    idleEnds(tunnel)
    socket.once("close", release)
    const headers = [
      ...forwardHeaders(
        request.rawHeaders,
        new Set([admitted.credential, "x-forwarded-for"]),
        true,
        platformCredential
      ),
      ...forwarded(request)
    ]
    let text = `${request.method} ${request.url} HTTP/1.1\r\n`
    for (const [name, value] of headers) text += `${name}: ${value}\r\n`
    tunnel.write(`${text}\r\n`, "latin1")
    if (head.length > 0) tunnel.write(head)
    const cleanup = () => {
      tunnel.destroy()
      socket.destroy()
    }
    tunnel.on("error", cleanup)
    socket.on("error", cleanup)
    tunnel.on("close", () => socket.destroy())
    socket.on("close", () => tunnel.destroy())
    socket.pipe(tunnel)
    tunnel.pipe(socket)
  }

  const handleRequest = (request: Http.IncomingMessage, response: Http.ServerResponse, target: PreviewTarget) =>
    open(request, target).pipe(
      Effect.matchCauseEffect({
        onFailure: (cause) => Effect.sync(() => answerRefusal(response, errorOf(cause))),
        onSuccess: ({ admitted, release, tunnel }) =>
          Effect.sync(() => {
            if (response.destroyed) return void (tunnel.destroy(), release())
            proxyRequest(request, response, admitted, tunnel, release)
          })
      })
    )

  const handleUpgrade = (request: Http.IncomingMessage, socket: Duplex, head: Buffer, target: PreviewTarget) =>
    open(request, target).pipe(
      Effect.matchCauseEffect({
        onFailure: (cause) => Effect.sync(() => refuseUpgrade(socket, errorOf(cause))),
        onSuccess: ({ admitted, release, tunnel }) =>
          Effect.sync(() => {
            if (socket.destroyed) return void (tunnel.destroy(), release())
            proxyUpgrade(request, socket, head, admitted, tunnel, release)
          })
      })
    )

  hooks.value.preview = {
    request: (request, response) => {
      const target = parsePreviewHost(request.headers.host, previews.domain)
      if (target === undefined) return false
      run(handleRequest(request, response, target))
      return true
    },
    upgrade: (request, socket, head) => {
      const target = parsePreviewHost(request.headers.host, previews.domain)
      if (target === undefined) return false
      socket.on("error", () => socket.destroy())
      run(handleUpgrade(request, socket, head, target))
      return true
    }
  }
  yield* Effect.addFinalizer(() => Effect.sync(() => void (hooks.value.preview = undefined)))
}))

/** The API error of a failed preview (a database or bus failure is 503, never a 500 with details). */
const errorOf = (cause: Cause.Cause<unknown>): unknown => {
  const error = Option.getOrUndefined(Cause.findErrorOption(cause))
  return Errors.isApiError(error) ? error : new Errors.Unavailable()
}
