/**
 * The egress proxy (Node side): every connection a sandbox opens arrives here from the front
 * (`native/svc-egress-front.c`) over a root-only unix socket, behind a PROXY v1 line that names
 * the sandbox's address and the original destination. Per connection:
 *
 *   - the sandbox: the machine-wide lease of its source address (`<leaseDir>/<ip>`);
 *   - port 53: DNS over TCP, answered by the sandboxes' resolver (`Dns.ts`);
 *   - HTTP: parsed by Node's HTTP server; each request is checked (Host header), resolved by the
 *     proxy itself and sent only to the checked address, with the sandbox's bound secrets
 *     written where their `allowed_hosts` match;
 *   - TLS: the ClientHello's SNI is read without answering; to a host a bound secret allows,
 *     TLS is terminated with a certificate of the platform's CA and handled as HTTP above, with
 *     a verified TLS connection upstream; to any other host, the bytes are tunnelled untouched
 *     to the checked address;
 *   - anything else (or a client that waits for the server to speak): tunnelled to the original
 *     address if the policy allows it.
 *
 * A connection from an address no sandbox of this platform holds, or from a sandbox the
 * platform's bucket has no entry for, is refused: the proxy never guesses a policy.
 *
 * HTTP is routed, checked and given secrets by one authority: an absolute-form request target
 * (`GET http://other.example/ HTTP/1.1`) is rewritten to origin form when it names the Host
 * header's host and the connection's port, and refused otherwise. A secret is written only where
 * one of its `allowed_hosts` entries names the scheme (HTTPS unless `http://`), the host and the
 * port (443 or 80 unless given).
 *
 * Bounds: a request head must be complete within `headerTimeoutMs` of the connection (or of the
 * previous response, on a kept-alive one), else 408 and closed; any connection idle (no byte
 * either way) for `idleTimeoutMs` is closed. A refusal is fast and says why: HTTP 403 with a
 * text body naming the reason, a TLS `access_denied` alert, a closed connection otherwise; the
 * first refusal of a sandbox is logged with the destination and the reason, then one line per
 * sandbox and interval with the count (a sandbox that retries in a loop does not flood the log);
 * never a secret.
 */
import { parseRule } from "@svc/domain/Network"
import { parseSecretDestination, secretDestinationMatches } from "@svc/domain/Secret"
import { type EgressSecret, type SandboxEgress, secretValueAad } from "@svc/host-protocol/Egress"
import { Result } from "effect"
import * as Dns from "node:dns"
import * as Fs from "node:fs/promises"
import * as Http from "node:http"
import * as Https from "node:https"
import * as net from "node:net"
import * as NodePath from "node:path"
import * as Tls from "node:tls"
import type { Ca } from "./Ca.ts"
import type { DefaultAction } from "./Config.ts"
import { type ResolvedNames, serveTcpDns } from "./Dns.ts"
import type { HostsTable } from "./HostsFile.ts"
import { type AddressRules, checkAddress, checkPolicy } from "./Policy.ts"
import { looksLikeHttp, parseClientHello, parseHostHeader, parseProxyHeader, type ProxyHeader } from "./Sniff.ts"

export interface EgressLog {
  readonly level: "info" | "warning"
  readonly message: string
  readonly sandboxId?: string
  readonly destination?: string
  readonly reason?: string
  /** Refusals of this sandbox (or source) since the last line about it. */
  readonly count?: number
}

export interface ProxyOptions {
  readonly socketPath: string
  readonly leaseDir: string
  readonly rules: AddressRules
  readonly defaultAction: DefaultAction
  readonly hosts: () => HostsTable
  /** PEM CAs trusted upstream besides the system's. */
  readonly upstreamCas: ReadonlyArray<string>
  readonly ca: Ca
  /** The sandbox's entry; undefined when the platform has none (the connection is refused). */
  readonly policyOf: (sandboxId: string) => Promise<SandboxEgress | undefined>
  readonly secretsOf: (sandboxId: string) => ReadonlyArray<EgressSecret>
  /** What the platform's resolvers answered (shared with the sandboxes' resolver). */
  readonly resolved: ResolvedNames
  /** How long refusals of one sandbox are counted before the next line about them. Default 10 s. */
  readonly logIntervalMs?: number
  /** How long a request head may take to arrive. Default 10 s. */
  readonly headerTimeoutMs?: number
  /** How long a connection may carry no byte in either direction. Default 5 min. */
  readonly idleTimeoutMs?: number
  /** Opens a sealed value (SecretBox); rejects when it does not open. */
  readonly open: (sealed: string, aad: string) => Promise<string>
  readonly log: (entry: EgressLog) => void
}

interface Connection {
  readonly sandboxId: string
  readonly header: ProxyHeader
  /** Set where TLS was terminated here: the SNI name the client asked for. */
  readonly terminated?: string
}

/** How long a client may take to send its first bytes before the connection is taken as raw TCP. */
const FIRST_BYTES_MS = 300
const MAX_SNIFF = 16_384 + 5
const CONNECT_TIMEOUT_MS = 10_000
const NAME_CACHE_MS = 5_000
const LOG_INTERVAL_MS = 10_000
const HEADER_TIMEOUT_MS = 10_000
const IDLE_TIMEOUT_MS = 5 * 60_000
/** Exact `deny_out` names resolved for a connection that carries no name: at most this many, this long. */
const DENIED_NAMES_RESOLVED = 20
const DENIED_NAMES_WAIT_MS = 2_000
const NO_POLICY = "the platform has no egress policy for this sandbox"
const REQUEST_TIMEOUT = "HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "te",
  "trailer",
  "upgrade",
  "transfer-encoding",
  "host"
])
/** TLS alert record: fatal (2), access_denied (49). */
const ACCESS_DENIED = Buffer.from([0x15, 0x03, 0x01, 0x00, 0x02, 0x02, 0x31])

type Target =
  | { readonly _tag: "Allow"; readonly address: string }
  | { readonly _tag: "Deny"; readonly reason: string }

export interface EgressProxy {
  readonly server: net.Server
  readonly close: () => Promise<void>
}

export const startProxy = async (options: ProxyOptions): Promise<EgressProxy> => {
  const connections = new WeakMap<net.Socket, Connection>()
  const names = new Map<string, { readonly until: number; readonly addresses: ReadonlyArray<string> }>()
  const upstreamCa = [...Tls.rootCertificates, ...options.upstreamCas]
  const httpAgent = new Http.Agent({ keepAlive: true, maxFreeSockets: 64 })
  const httpsAgent = new Https.Agent({ keepAlive: true, maxFreeSockets: 64, ca: upstreamCa })
  const headerTimeoutMs = options.headerTimeoutMs ?? HEADER_TIMEOUT_MS
  const idleTimeoutMs = options.idleTimeoutMs ?? IDLE_TIMEOUT_MS

  const sandboxOf = async (address: string): Promise<string | undefined> => {
    if (net.isIPv4(address) === false) return undefined
    const text = await Fs.readFile(NodePath.join(options.leaseDir, address), "utf8").catch(() => undefined)
    if (text === undefined) return undefined
    try {
      const owner = JSON.parse(text) as { sandboxId?: unknown }
      return typeof owner.sandboxId === "string" ? owner.sandboxId : undefined
    } catch {
      return undefined
    }
  }

  /** The hosts file first, then the system's resolver; every address of the answer. */
  const resolve = async (name: string): Promise<ReadonlyArray<string>> => {
    const fromFile = options.hosts().get(name)
    if (fromFile !== undefined) {
      const addresses = fromFile.map((entry) => entry.address)
      options.resolved.record(name, addresses)
      return addresses
    }
    const cached = names.get(name)
    if (cached !== undefined && cached.until > Date.now()) return cached.addresses
    const entries = await Dns.promises.lookup(name, { all: true, order: "verbatim" }).catch(() => [])
    const addresses = entries.map((entry) => entry.address)
    if (names.size > 10_000) names.clear()
    if (addresses.length > 0) {
      names.set(name, { until: Date.now() + NAME_CACHE_MS, addresses })
      options.resolved.record(name, addresses)
    }
    return addresses
  }

  /**
   * Where this sandbox may connect for `name` (or, without one, the original address): every
   * address the name resolves to must be reachable at all (no rebinding games between them),
   * then the first one the sandbox's policy allows.
   */
  const target = async (sandboxId: string, name: string | undefined, fallback: string): Promise<Target> => {
    const entry = await options.policyOf(sandboxId)
    if (entry === undefined) return { _tag: "Deny", reason: NO_POLICY }
    const policy = entry.policy
    const addresses = name === undefined ? [fallback] : net.isIP(name) !== 0 ? [name] : await resolve(name)
    if (addresses.length === 0) return { _tag: "Deny", reason: `${name} does not resolve` }
    for (const address of addresses) {
      const verdict = checkAddress(address, options.rules)
      if (verdict._tag === "Deny") return verdict
    }
    const domain = name !== undefined && net.isIP(name) === 0 ? name : undefined
    if (domain === undefined) await resolveDenied(policy.deny_out)
    let first: Target | undefined
    for (const address of addresses) {
      const verdict = checkPolicy(policy, options.defaultAction, {
        name: domain,
        address,
        named: name !== undefined,
        namesOf: (a) => options.resolved.namesOf(a)
      })
      if (verdict._tag === "Allow") return { _tag: "Allow", address }
      first ??= verdict
    }
    return first!
  }

  /**
   * A connection by address alone (an IP literal, or no name at all): the exact names of the
   * `deny_out` domain rules are resolved first, so that their addresses are known to the check
   * even when the sandbox found them elsewhere (its own DNS over HTTPS, a hard-coded address).
   */
  const resolveDenied = async (denyOut: ReadonlyArray<string>) => {
    const exact = denyOut.flatMap((text) =>
      Result.match(parseRule(text), {
        onSuccess: (rule) => (rule._tag === "Domain" && !rule.wildcard ? [rule.name] : []),
        onFailure: () => []
      })
    ).slice(0, DENIED_NAMES_RESOLVED)
    if (exact.length === 0) return
    let timer: NodeJS.Timeout | undefined
    await Promise.race([
      Promise.all(exact.map(resolve)),
      new Promise<void>((done) => (timer = setTimeout(done, DENIED_NAMES_WAIT_MS)))
    ])
    clearTimeout(timer)
  }

  // Refusals, counted per sandbox (or source address): the first is logged as it happens, the
  // rest as one line per interval with their count and the last destination and reason.
  const refusals = new Map<string, { count: number; last: EgressLog }>()
  const refusedBy = (key: string, entry: EgressLog) => {
    const seen = refusals.get(key)
    if (seen !== undefined) {
      seen.count++
      seen.last = entry
      return
    }
    if (refusals.size >= 10_000) return // a flood of sources: counted again after the next interval
    refusals.set(key, { count: 0, last: entry })
    options.log(entry)
  }
  const flushRefusals = setInterval(() => {
    for (const [key, seen] of refusals) {
      if (seen.count === 0) {
        refusals.delete(key)
        continue
      }
      options.log({ ...seen.last, message: `${seen.last.message} (repeated)`, count: seen.count })
      seen.count = 0
    }
  }, options.logIntervalMs ?? LOG_INTERVAL_MS)
  flushRefusals.unref()

  const refused = (connection: Connection, destination: string, reason: string) =>
    refusedBy(connection.sandboxId, {
      level: "warning",
      message: "egress: connection refused",
      sandboxId: connection.sandboxId,
      destination,
      reason
    })

  // ---------------------------------------------------------------------------------------
  // HTTP (plain, or inside TLS terminated here)

  /** The bound secrets one of whose `allowed_hosts` entries names this scheme, host and port. */
  const secretsFor = (
    sandboxId: string,
    request: { readonly scheme: "https" | "http"; readonly host: string; readonly port: number }
  ) =>
    options.secretsOf(sandboxId).filter((secret) =>
      secret.allowedHosts.some((text) => {
        const entry = parseSecretDestination(text)
        return Result.isSuccess(entry) && secretDestinationMatches(entry.success, request)
      })
    )

  /**
   * The one authority a request is routed, checked and given secrets by, and its target in
   * origin form: an absolute-form target must name the Host header's host (or stands for it when
   * there is none) and the connection's port; anything else is refused.
   */
  const routeOf = (
    req: Http.IncomingMessage,
    connection: Connection
  ):
    | { readonly _tag: "Route"; readonly path: string; readonly host: ReturnType<typeof parseHostHeader> }
    | { readonly _tag: "Refused"; readonly status: number; readonly text: string } =>
  {
    const header = parseHostHeader(req.headers.host)
    if (header === undefined && req.headers.host !== undefined) {
      return { _tag: "Refused", status: 400, text: "egress: bad Host header\n" }
    }
    const url = req.url ?? "/"
    if (url.startsWith("/") || (url === "*" && req.method === "OPTIONS")) {
      return { _tag: "Route", path: url, host: header }
    }
    const tls = connection.terminated !== undefined
    let absolute: URL | undefined
    try {
      absolute = /^[a-z][a-z0-9+.-]*:\/\//i.test(url) ? new URL(url) : undefined
    } catch {
      absolute = undefined
    }
    if (absolute === undefined || absolute.protocol !== (tls ? "https:" : "http:")) {
      return { _tag: "Refused", status: 400, text: "egress: the request target must be a path (origin form)\n" }
    }
    const named = parseHostHeader(absolute.host)
    const port = absolute.port === "" ? (tls ? 443 : 80) : Number(absolute.port)
    const sameHost = named !== undefined && (header === undefined || header.host === named.host)
    if (
      !sameHost || port !== connection.header.destinationPort || absolute.username !== "" || absolute.password !== ""
    ) {
      return {
        _tag: "Refused",
        status: 400,
        text: "egress: an absolute request target must name the Host header's host and this connection's port\n"
      }
    }
    if (header === undefined) req.headers.host = absolute.host
    return { _tag: "Route", path: `${absolute.pathname}${absolute.search}`, host: named }
  }

  const answer = (res: Http.ServerResponse, status: number, text: string) => {
    if (res.headersSent) return void res.destroy()
    res.writeHead(status, { "content-type": "text/plain; charset=utf-8", "content-length": Buffer.byteLength(text) })
    res.end(text)
  }

  /** The request's headers to send upstream: hop-by-hop gone, each bound secret's header set once. */
  const upstreamHeaders = async (
    req: Http.IncomingMessage,
    secrets: ReadonlyArray<EgressSecret>
  ): Promise<Http.OutgoingHttpHeaders> => {
    const injected = new Map<string, { name: string; value: string }>()
    for (const secret of secrets) {
      const key = secret.headerName.toLowerCase()
      if (injected.has(key)) continue // the first bound secret of a header name wins
      const value = await options.open(secret.sealedValue, secretValueAad(secret.secretId))
      injected.set(key, { name: secret.headerName, value: secret.headerFormat.split("{value}").join(value) })
    }
    const headers: Http.OutgoingHttpHeaders = {}
    const connectionTokens = (req.headers.connection ?? "").toLowerCase().split(",").map((t) => t.trim())
    for (const [key, value] of Object.entries(req.headers)) {
      if (value === undefined || HOP_BY_HOP.has(key) || connectionTokens.includes(key) || injected.has(key)) continue
      headers[key] = value
    }
    headers.host = req.headers.host
    for (const { name, value } of injected.values()) headers[name] = value
    return headers
  }

  const onRequest = (req: Http.IncomingMessage, res: Http.ServerResponse) => {
    const connection = connections.get(req.socket as net.Socket)
    if (connection === undefined) return answer(res, 500, "egress: unknown connection\n")
    void handleRequest(connection, req, res).catch((e: unknown) => {
      options.log({
        level: "warning",
        message: "egress: request failed",
        sandboxId: connection.sandboxId,
        reason: String(e)
      })
      answer(res, 502, "egress: the request failed in the platform's proxy\n")
    })
  }

  const handleRequest = async (connection: Connection, req: Http.IncomingMessage, res: Http.ServerResponse) => {
    const port = connection.header.destinationPort
    const tls = connection.terminated !== undefined
    if (req.method === "CONNECT") return answer(res, 405, "egress: no proxy needed; connect directly\n")
    const route = routeOf(req, connection)
    if (route._tag === "Refused") return answer(res, route.status, route.text)
    const host = route.host
    if (tls && host?.host !== connection.terminated) {
      return answer(res, 421, `egress: Host does not match the TLS server name ${connection.terminated}\n`)
    }
    const name = host?.host
    const destination = `${name ?? connection.header.destination}:${port}`
    const checked = await target(connection.sandboxId, name, connection.header.destination)
    if (checked._tag === "Deny") {
      refused(connection, destination, checked.reason)
      return answer(res, 403, `egress refused by the platform: ${checked.reason} (${destination})\n`)
    }
    const secrets = name !== undefined
      ? secretsFor(connection.sandboxId, { scheme: tls ? "https" : "http", host: name, port })
      : []
    let headers: Http.OutgoingHttpHeaders
    try {
      headers = await upstreamHeaders(req, secrets)
    } catch {
      options.log({
        level: "warning",
        message: "egress: a bound secret did not open",
        sandboxId: connection.sandboxId,
        destination
      })
      return answer(res, 502, "egress: a secret bound to this sandbox could not be opened\n")
    }
    const request = tls
      ? Https.request({
        host: checked.address,
        port,
        servername: name!,
        method: req.method,
        path: route.path,
        headers,
        setHost: false,
        agent: httpsAgent,
        timeout: CONNECT_TIMEOUT_MS
      })
      : Http.request({
        host: checked.address,
        port,
        method: req.method,
        path: route.path,
        headers,
        setHost: false,
        agent: httpAgent,
        timeout: CONNECT_TIMEOUT_MS
      })
    request.on("response", (upstream) => {
      const out: Http.OutgoingHttpHeaders = {}
      for (const [key, value] of Object.entries(upstream.headers)) {
        if (value !== undefined && key !== "connection" && key !== "keep-alive" && key !== "transfer-encoding") {
          out[key] = value
        }
      }
      res.writeHead(upstream.statusCode ?? 502, upstream.statusMessage, out)
      upstream.pipe(res)
      upstream.on("error", () => res.destroy())
    })
    request.on("timeout", () => request.destroy(new Error("upstream timed out")))
    request.on("error", (e: NodeJS.ErrnoException) => {
      if (res.headersSent) return void res.destroy()
      const reason = e.code ?? e.message
      answer(res, 502, `egress: ${destination} failed (${reason})\n`)
    })
    req.pipe(request)
  }

  // The head timer: armed when an HTTP connection starts and when a response ends (the next
  // head of a kept-alive connection), cleared when a head is complete. Node's own headersTimeout
  // needs a listening server, and this one is only handed connections.
  const heads = new WeakMap<net.Socket, NodeJS.Timeout>()
  const awaitHead = (socket: net.Socket) => {
    clearTimeout(heads.get(socket))
    if (socket.destroyed) return
    const timer = setTimeout(() => {
      if (!socket.destroyed) socket.end(REQUEST_TIMEOUT, () => socket.destroy())
    }, headerTimeoutMs)
    heads.set(socket, timer)
    socket.once("close", () => clearTimeout(timer))
  }
  const headArrived = (socket: net.Socket) => clearTimeout(heads.get(socket))

  const httpServer = Http.createServer(
    { keepAliveTimeout: headerTimeoutMs, headersTimeout: headerTimeoutMs, requestTimeout: 0 },
    (req, res) => {
      const socket = req.socket as net.Socket
      headArrived(socket)
      res.once("close", () => awaitHead(socket))
      onRequest(req, res)
    }
  )
  // Idle connections: Node arms the socket timeout with this and emits `timeout` here.
  httpServer.setTimeout(idleTimeoutMs, (socket: net.Socket) => socket.destroy())
  httpServer.on("clientError", (_error, socket) => socket.destroy())
  // WebSocket and other upgrades: checked like a request, then the bytes go through as they are.
  httpServer.on("upgrade", (req: Http.IncomingMessage, socket: net.Socket, head: Buffer) => {
    headArrived(socket)
    const connection = connections.get(socket)
    if (connection === undefined) return void socket.destroy()
    void (async () => {
      const route = routeOf(req, connection)
      if (route._tag === "Refused") {
        return void socket.end(
          `HTTP/1.1 ${route.status} Bad Request\r\ncontent-type: text/plain\r\ncontent-length: ${
            Buffer.byteLength(route.text)
          }\r\nconnection: close\r\n\r\n${route.text}`
        )
      }
      const host = route.host
      const name = host?.host
      const port = connection.header.destinationPort
      const tls = connection.terminated !== undefined
      if (tls && name !== connection.terminated) return void socket.destroy()
      const destination = `${name ?? connection.header.destination}:${port}`
      const checked = await target(connection.sandboxId, name, connection.header.destination)
      if (checked._tag === "Deny") {
        refused(connection, destination, checked.reason)
        const text = `egress refused by the platform: ${checked.reason} (${destination})\n`
        return void socket.end(
          `HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain\r\ncontent-length: ${
            Buffer.byteLength(text)
          }\r\nconnection: close\r\n\r\n${text}`
        )
      }
      const secrets = name !== undefined
        ? secretsFor(connection.sandboxId, { scheme: tls ? "https" : "http", host: name, port })
        : []
      const headers = await upstreamHeaders(req, secrets)
      headers.connection = "Upgrade"
      if (req.headers.upgrade !== undefined) headers.upgrade = req.headers.upgrade
      const upstream = connection.terminated !== undefined
        ? Tls.connect({ host: checked.address, port, servername: name!, ca: upstreamCa })
        : net.connect({ host: checked.address, port })
      upstream.on("error", () => socket.destroy())
      socket.on("error", () => upstream.destroy())
      upstream.setTimeout(idleTimeoutMs, () => upstream.destroy())
      socket.setTimeout(idleTimeoutMs, () => socket.destroy())
      upstream.on("close", () => socket.destroy())
      socket.on("close", () => upstream.destroy())
      const lines = [`${req.method} ${route.path} HTTP/1.1`]
      for (const [key, value] of Object.entries(headers)) {
        for (const one of Array.isArray(value) ? value : [value]) lines.push(`${key}: ${String(one)}`)
      }
      upstream.write(lines.join("\r\n") + "\r\n\r\n")
      if (head.length > 0) upstream.write(head)
      upstream.pipe(socket)
      socket.pipe(upstream)
    })().catch(() => socket.destroy())
  })

  // ---------------------------------------------------------------------------------------
  // Connections

  const tunnel = async (
    socket: net.Socket,
    connection: Connection,
    name: string | undefined,
    initial: Buffer,
    tls: boolean
  ) => {
    const port = connection.header.destinationPort
    const destination = `${name ?? connection.header.destination}:${port}`
    const checked = await target(connection.sandboxId, name, connection.header.destination)
    if (checked._tag === "Deny") {
      refused(connection, destination, checked.reason)
      if (tls) socket.end(ACCESS_DENIED)
      else socket.destroy()
      return
    }
    const upstream = net.connect({ host: checked.address, port, timeout: CONNECT_TIMEOUT_MS })
    upstream.setNoDelay(true)
    // Connected: from then on the bound is idleness, on either side.
    upstream.once("connect", () => upstream.setTimeout(idleTimeoutMs))
    upstream.on("timeout", () => upstream.destroy())
    socket.setTimeout(idleTimeoutMs, () => socket.destroy())
    upstream.on("error", () => socket.destroy())
    socket.on("error", () => upstream.destroy())
    socket.on("close", () => upstream.destroy())
    upstream.on("close", () => socket.destroy())
    if (initial.length > 0) upstream.write(initial)
    socket.pipe(upstream)
    upstream.pipe(socket)
    socket.resume()
  }

  /** Reads until `enough` says so, the sniff limit, or `ms` of silence; the socket is left paused. */
  const readFirst = (socket: net.Socket, start: Buffer, enough: (b: Buffer) => boolean, ms: number) =>
    new Promise<Buffer>((resolve) => {
      let buffer = start
      if (enough(buffer)) return resolve(buffer)
      const finish = () => {
        clearTimeout(timer)
        socket.off("data", onData)
        socket.off("end", finish)
        socket.pause()
        resolve(buffer)
      }
      const onData = (chunk: Buffer) => {
        buffer = Buffer.concat([buffer, chunk])
        if (enough(buffer) || buffer.length >= MAX_SNIFF) finish()
      }
      const timer = setTimeout(finish, ms)
      socket.on("data", onData)
      socket.once("end", finish)
      socket.resume()
    })

  const handle = async (socket: net.Socket) => {
    socket.on("error", () => undefined)
    const first = await readFirst(socket, Buffer.alloc(0), (b) => parseProxyHeader(b) !== undefined, 5_000)
    const header = parseProxyHeader(first)
    if (header === undefined || header instanceof Error) return void socket.destroy()
    const sandboxId = await sandboxOf(header.source)
    if (sandboxId === undefined) {
      refusedBy(`source ${header.source}`, {
        level: "warning",
        message: "egress: connection from an address no sandbox holds",
        destination: `${header.destination}:${header.destinationPort}`,
        reason: `source ${header.source}`
      })
      return void socket.destroy()
    }
    const connection: Connection = { sandboxId, header }
    // A sandbox of another platform on this bridge, or one whose entry is gone: never a guess.
    if (await options.policyOf(sandboxId) === undefined) {
      refused(connection, `${header.destination}:${header.destinationPort}`, NO_POLICY)
      return void socket.destroy()
    }
    if (header.destinationPort === 53) return serveTcpDns(socket, options.hosts, header.rest, options.resolved)
    const initial = await readFirst(
      socket,
      header.rest,
      (b) => parseClientHello(b)._tag !== "Incomplete" && (b[0] === 0x16 || looksLikeHttp(b) !== undefined),
      FIRST_BYTES_MS
    )
    if (socket.destroyed) return
    const hello = parseClientHello(initial)
    if (hello._tag === "Hello") {
      const name = hello.serverName
      const binds = name !== undefined &&
        secretsFor(sandboxId, { scheme: "https", host: name, port: header.destinationPort }).length > 0
      if (!binds) return tunnel(socket, connection, name, initial, true)
      // A bound secret's host: checked before any certificate is shown.
      const checked = await target(sandboxId, name, header.destination)
      if (checked._tag === "Deny") {
        refused(connection, `${name}:${header.destinationPort}`, checked.reason)
        return void socket.end(ACCESS_DENIED)
      }
      const secureContext = await options.ca.contextFor(name)
      socket.unshift(initial)
      const tls = new Tls.TLSSocket(socket, { isServer: true, secureContext, ALPNProtocols: ["http/1.1"] })
      tls.on("error", () => socket.destroy())
      tls.on("close", () => socket.destroy())
      connections.set(tls, { ...connection, terminated: name })
      awaitHead(tls) // the handshake included
      httpServer.emit("connection", tls)
      return
    }
    if (looksLikeHttp(initial) === true) {
      socket.unshift(initial)
      connections.set(socket, connection)
      awaitHead(socket)
      httpServer.emit("connection", socket)
      socket.resume()
      return
    }
    return tunnel(socket, connection, undefined, initial, false)
  }

  await Fs.rm(options.socketPath, { force: true })
  const open = new Set<net.Socket>()
  const server = net.createServer({ pauseOnConnect: false }, (socket) => {
    open.add(socket)
    socket.once("close", () => open.delete(socket))
    void handle(socket).catch(() => socket.destroy())
  })
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject)
    server.listen(options.socketPath, () => {
      server.off("error", reject)
      resolve()
    })
  })
  await Fs.chmod(options.socketPath, 0o600)
  return {
    server,
    close: () =>
      new Promise<void>((resolve) => {
        clearInterval(flushRefusals)
        httpAgent.destroy()
        httpsAgent.destroy()
        httpServer.closeAllConnections()
        server.close(() => resolve())
        for (const socket of open) socket.destroy()
      })
  }
}
