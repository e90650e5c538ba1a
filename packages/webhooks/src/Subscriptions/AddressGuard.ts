/**
 * The webhook URL guard: a webhook may only reach public addresses
 * (docs/contract.md#webhook-record, #errors: `invalid_webhook_url`). The guard parses the URL,
 * resolves its host and checks EVERY address; `connectTarget` hands the attempt the checked
 * addresses so the connection cannot go anywhere else (DNS rebinding between check and connect).
 */
import { allowedRules, classifyAddress, type Subnet } from "@svc/domain/Address"
import { MAX_WEBHOOK_URL_LENGTH } from "@svc/domain/Webhook"
import { Clock, Context, Duration, Effect, Layer, Result, Schema } from "effect"
import * as dns from "node:dns"
import * as net from "node:net"
import { AllowedSubnets } from "../Config.ts"

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

export const WebhookUrlRefusalReason = Schema.Literals([
  "malformed",
  "too_long",
  "unsupported_scheme",
  "credentials_in_url",
  "invalid_port",
  "non_public_address",
  "unresolvable"
])
export type WebhookUrlRefusalReason = typeof WebhookUrlRefusalReason.Type

/**
 * The guard refused the URL as a webhook target, and why. `message` is safe to show to the
 * caller (it never names an address a hostname resolved to: that would let callers probe
 * internal DNS). Not a wire error: the webhooks service answers the domain's
 * `InvalidWebhookUrl` (400 `invalid_webhook_url`) with this message; an attempt records it.
 */
export class WebhookUrlRefused extends Schema.TaggedError<WebhookUrlRefused>()("WebhookUrlRefused", {
  reason: WebhookUrlRefusalReason,
  message: Schema.String
}) {}

/** The resolver could not produce addresses for a host (NXDOMAIN, timeout, ...). */
export class WebhookResolveError extends Schema.TaggedError<WebhookResolveError>()("WebhookResolveError", {
  hostname: Schema.String,
  message: Schema.String
}) {}

/** The classification is shared with the hosts' egress proxies (@svc/domain/Address). */
export { type AddressClass, classifyAddress } from "@svc/domain/Address"

// ---------------------------------------------------------------------------------------------
// URL parsing (pure)
// ---------------------------------------------------------------------------------------------

export interface ParsedWebhookUrl {
  /** Normalised by the WHATWG parser: this is what was checked and what should be stored. */
  readonly href: string
  readonly protocol: "http:" | "https:"
  /** Host name without IPv6 brackets, as the resolver and TLS servername want it. */
  readonly hostname: string
  readonly port: number
  /** Set when the host is an IP literal (already normalised: `http://0x7f.1/` is 127.0.0.1). */
  readonly literal: string | null
}

const invalid = (reason: WebhookUrlRefusalReason, message: string) => new WebhookUrlRefused({ reason, message })

/** Names that always mean this machine (RFC 6761), refused without asking DNS. */
const isLocalhostName = (hostname: string) => {
  const name = hostname.endsWith(".") ? hostname.slice(0, -1) : hostname
  return name === "localhost" || name.endsWith(".localhost")
}

/**
 * The guard's reading of a URL: what to resolve and where to connect (the API checks the
 * contract's syntax rule first, the domain's `parseWebhookUrl`).
 */
export const parseTargetUrl = (input: string): Result.Result<ParsedWebhookUrl, WebhookUrlRefused> => {
  if (input.length > MAX_WEBHOOK_URL_LENGTH) {
    return Result.fail(invalid("too_long", `url is longer than ${MAX_WEBHOOK_URL_LENGTH} characters`))
  }
  const url = URL.parse(input)
  if (url === null) return Result.fail(invalid("malformed", "url is not a valid absolute URL"))
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    return Result.fail(invalid("unsupported_scheme", "url must use http or https"))
  }
  if (url.username !== "" || url.password !== "") {
    return Result.fail(invalid("credentials_in_url", "url must not contain credentials"))
  }
  const port = url.port === "" ? (url.protocol === "https:" ? 443 : 80) : Number(url.port)
  if (port === 0) return Result.fail(invalid("invalid_port", "url port must be between 1 and 65535"))
  const bracketed = url.hostname.startsWith("[") && url.hostname.endsWith("]")
  const hostname = bracketed ? url.hostname.slice(1, -1) : url.hostname
  if (hostname === "") return Result.fail(invalid("malformed", "url has no host"))
  if (isLocalhostName(hostname)) {
    return Result.fail(invalid("non_public_address", "url host is localhost (loopback)"))
  }
  return Result.succeed({
    href: url.href,
    protocol: url.protocol,
    hostname,
    port,
    literal: net.isIP(hostname) === 0 ? null : hostname
  })
}

// ---------------------------------------------------------------------------------------------
// Services
// ---------------------------------------------------------------------------------------------

export interface ResolvedAddress {
  readonly address: string
  readonly family: 4 | 6
}

/**
 * Host name → addresses. A service so that tests (and a future caching resolver) can replace the
 * system resolver; the guard asks it exactly once per check.
 */
export class WebhookResolver extends Context.Service<WebhookResolver, {
  readonly lookup: (hostname: string) => Effect.Effect<ReadonlyArray<ResolvedAddress>, WebhookResolveError>
}>()("@svc/webhooks/AddressGuard/WebhookResolver") {
  /** The system resolver (`getaddrinfo`, so /etc/hosts counts), all addresses, 5 s at most. */
  static readonly layer = Layer.succeed(WebhookResolver)(WebhookResolver.of({
    lookup: (hostname) =>
      Effect.tryPromise({
        try: () => dns.promises.lookup(hostname, { all: true, order: "verbatim" }),
        catch: (cause) =>
          new WebhookResolveError({
            hostname,
            message: `lookup failed (${(cause as NodeJS.ErrnoException | undefined)?.code ?? "error"})`
          })
      }).pipe(
        Effect.map((entries) =>
          entries.map((entry) => ({ address: entry.address, family: entry.family === 6 ? 6 : 4 } as const))
        ),
        Effect.timeoutOrElse({
          duration: Duration.seconds(5),
          orElse: () => Effect.fail(new WebhookResolveError({ hostname, message: "lookup timed out" }))
        })
      )
  }))
}

export interface CheckedUrl {
  /** The normalised URL that was checked. */
  readonly url: string
  /** Every address the host resolved to, all of them public or allowed. */
  readonly addresses: ReadonlyArray<string>
}

/** Where an attempt may connect: only `addresses`, which were all checked just now. */
export interface ConnectTarget {
  readonly url: string
  readonly protocol: "http:" | "https:"
  /** Original host name (no brackets): the request's Host header and TLS servername. */
  readonly hostname: string
  readonly port: number
  /** Path and query to request. */
  readonly path: string
  /** The address to connect to: the first checked one. */
  readonly address: string
  readonly family: 4 | 6
  /** All checked addresses, in resolver order (for happy-eyeballs between them). */
  readonly addresses: ReadonlyArray<ResolvedAddress>
}

export interface WebhookAddressGuardOptions {
  readonly allowedSubnets: ReadonlyArray<Subnet>
  /**
   * How long `connectTarget` reuses a URL's checked answer (default 5 s; 0: never). An attempt
   * still connects only to addresses that were checked; a DNS change is seen this much later.
   */
  readonly targetCacheMs?: number
}

/** `connectTarget`'s cache: entries beyond this many start it afresh. */
const TARGET_CACHE_MAX = 10_000

export class WebhookAddressGuard extends Context.Service<WebhookAddressGuard, {
  /** For create/update: is this URL a valid, public webhook target right now? */
  readonly checkUrl: (url: string) => Effect.Effect<CheckedUrl, WebhookUrlRefused>
  /**
   * For every attempt: resolve once, check all, and say where to connect. A URL's answer is
   * reused for `targetCacheMs` (checked addresses only: no rebinding in between).
   */
  readonly connectTarget: (url: string) => Effect.Effect<ConnectTarget, WebhookUrlRefused>
}>()("@svc/webhooks/AddressGuard/WebhookAddressGuard") {
  static readonly make = Effect.fnUntraced(function*(options: WebhookAddressGuardOptions) {
    const resolver = yield* WebhookResolver
    const allowed = allowedRules(options.allowedSubnets)

    const resolveChecked = Effect.fnUntraced(function*(parsed: ParsedWebhookUrl) {
      const resolved: ReadonlyArray<ResolvedAddress> = parsed.literal !== null
        ? [{ address: parsed.literal, family: net.isIPv6(parsed.literal) ? 6 : 4 }]
        : yield* resolver.lookup(parsed.hostname).pipe(
          Effect.mapError(() => invalid("unresolvable", "url host does not resolve"))
        )
      if (resolved.length === 0) return yield* invalid("unresolvable", "url host does not resolve")
      for (const { address } of resolved) {
        const verdict = classifyAddress(address, allowed)
        if (verdict._tag === "NonPublic") {
          return yield* invalid(
            "non_public_address",
            parsed.literal !== null
              ? `url host ${parsed.literal} is not a public address (${verdict.range})`
              : `url host resolves to a non-public address (${verdict.range})`
          )
        }
      }
      return resolved
    })

    const parse = (url: string) => Effect.fromResult(parseTargetUrl(url))

    const checkUrl = Effect.fn("WebhookAddressGuard.checkUrl")(function*(url: string) {
      const parsed = yield* parse(url)
      const resolved = yield* resolveChecked(parsed)
      return { url: parsed.href, addresses: resolved.map((entry) => entry.address) }
    })

    // Once per attempt: untraced (a span and a stack capture per call were ~3 % of a delivery);
    // the attempt's batch statements carry the spans. A burst of deliveries to one endpoint
    // parses and resolves its url once per `targetCacheMs`.
    const targetCacheMs = options.targetCacheMs ?? 5_000
    const targets = new Map<string, { readonly target: ConnectTarget; readonly until: number }>()
    const connectTarget = (url: string): Effect.Effect<ConnectTarget, WebhookUrlRefused> =>
      Clock.clockWith((clock) => {
        const now = clock.currentTimeMillisUnsafe()
        const cached = targets.get(url)
        if (cached !== undefined && cached.until > now) return Effect.succeed(cached.target)
        return Effect.tap(resolveTarget(url), (target) =>
          Effect.sync(() => {
            if (targetCacheMs <= 0) return
            if (targets.size >= TARGET_CACHE_MAX) targets.clear()
            targets.set(url, { target, until: now + targetCacheMs })
          }))
      })

    const resolveTarget = Effect.fnUntraced(function*(url: string) {
      const parsed = yield* parse(url)
      const resolved = yield* resolveChecked(parsed)
      const parts = new URL(parsed.href)
      const first = resolved[0]!
      return {
        url: parsed.href,
        protocol: parsed.protocol,
        hostname: parsed.hostname,
        port: parsed.port,
        path: `${parts.pathname}${parts.search}`,
        address: first.address,
        family: first.family,
        addresses: resolved
      } satisfies ConnectTarget
    })

    return WebhookAddressGuard.of({ checkUrl, connectTarget })
  })

  /** Allow-list from the given options; needs a `WebhookResolver`. */
  static readonly layerWith = (options: WebhookAddressGuardOptions) =>
    Layer.effect(WebhookAddressGuard)(WebhookAddressGuard.make(options))

  /** Allow-list from `SVC_WEBHOOK_ALLOWED_SUBNETS` (a bad entry fails the layer with a ConfigError). */
  static readonly layerConfig = Layer.effect(WebhookAddressGuard)(
    Effect.gen(function*() {
      const allowedSubnets = yield* AllowedSubnets
      return yield* WebhookAddressGuard.make({ allowedSubnets })
    })
  )

  /** Production: configured allow-list and the system resolver. */
  static readonly layer = WebhookAddressGuard.layerConfig.pipe(Layer.provide(WebhookResolver.layer))
}
