/**
 * Exposed ports (docs/contract.md#exposed-ports): a request to
 * `{port}-{sandbox_id}.{SVC_PREVIEW_DOMAIN}` on an API process reaches that port of the sandbox,
 * wherever its host is, through a tunnel the sandbox's agent opens (`tunnel` below: an upgrade, `@svc/hosts/Upgrade`).
 *
 * Preview tokens are stateless, so that any API process checks any token: `svc_pv_` and the
 * SecretBox seal of `{orgId, sandboxId, port, expiresAt}` (AAD `preview-token`). Only the
 * platform's keys make one, nobody can read or change what it names, and `SVC_ENCRYPTION_KEYS`
 * rotates them with everything else. A token cannot be revoked before it expires: they are
 * short-lived (1 hour unless asked otherwise, 24 hours at most), and a deleted sandbox or a port
 * removed from `exposed_ports` refuses them at once (both are checked on every request).
 */
import { SecretBox } from "@svc/crypto/SecretBox"
import type * as Rows from "@svc/db/Rows"
import * as Errors from "@svc/domain/Errors"
import type { OrgId } from "@svc/domain/Ids"
import {
  AgentApi,
  AgentBadGateway,
  AgentFailed,
  AgentInvalid,
  AgentNotFound,
  AgentNotRunning,
  AgentUnauthorized,
  TUNNEL_PROTOCOL
} from "@svc/host-protocol/DataPlane"
import type { HostRecord } from "@svc/host-protocol/Protocol"
import { Hosts } from "@svc/hosts/Hosts"
import * as Upgrade from "@svc/hosts/Upgrade"
import { Context, Effect, Layer, Option, Schema } from "effect"
import { HttpApiClient } from "effect/http-api"
import type * as Net from "node:net"
import { PreviewDomain } from "./Config.ts"
import { Sandboxes } from "./Sandboxes.ts"
import type { SandboxActorState } from "./Sandboxes/Model.ts"

export const PREVIEW_TOKEN_PREFIX = "svc_pv_"
export const PREVIEW_TOKEN_HEADER = "x-svc-preview-token"
const TOKEN_AAD = "preview-token"
export const DEFAULT_TOKEN_TTL_S = 3600
export const MAX_TOKEN_TTL_S = 86_400
export const MIN_TOKEN_TTL_S = 60

const TokenClaims = Schema.Struct({
  orgId: Schema.String,
  sandboxId: Schema.String,
  port: Schema.Int,
  /** ms since the epoch. */
  expiresAt: Schema.Number
})
type TokenClaims = typeof TokenClaims.Type
const encodeClaims = Schema.encodeSync(Schema.fromJsonString(TokenClaims))
const decodeClaims = Schema.decodeUnknownOption(Schema.fromJsonString(TokenClaims))

/** A preview host, parsed: `{port}-{sandbox_id}.{domain}`, any case, with or without `:port`. */
export interface PreviewTarget {
  readonly port: number
  readonly sandboxId: string
}

/**
 * The target a `Host` header names, or undefined when it is not a preview host of `domain`
 * (the request then goes to the API as usual).
 */
export const parsePreviewHost = (host: string | undefined, domain: string): PreviewTarget | undefined => {
  if (host === undefined) return undefined
  const name = host.toLowerCase().replace(/:\d{1,5}$/, "").replace(/\.$/, "")
  const suffix = `.${domain}`
  if (!name.endsWith(suffix)) return undefined
  const match = /^(\d{1,5})-(sbx_[0-9a-z]{26})$/.exec(name.slice(0, -suffix.length))
  if (match === null) return undefined
  const port = Number(match[1])
  return port >= 1 && port <= 65_535 ? { port, sandboxId: match[2]! } : undefined
}

export interface PreviewToken {
  readonly url: string
  readonly token: string
  readonly expiresAt: number
}

/** Where a client reached this API process: the preview URL uses the same scheme and port. */
export interface PreviewOrigin {
  readonly scheme: "http" | "https"
  readonly port: number | undefined
}

export class Previews extends Context.Service<Previews, {
  /** The preview domain (`SVC_PREVIEW_DOMAIN`), lowercase. */
  readonly domain: string
  /** A token for one exposed port of a sandbox of the org (404 for a port it does not expose). */
  readonly mint: (
    orgId: OrgId,
    sandboxId: string,
    port: number,
    ttlS: number,
    origin: PreviewOrigin
  ) => Effect.Effect<PreviewToken, Errors.NotFound | Rows.QueryError>
  /** The org a token lets in on `target`, or undefined (wrong, expired, or for another port). */
  readonly verify: (token: string, target: PreviewTarget) => Effect.Effect<OrgId | undefined>
  /**
   * A connection to the port: the org's sandbox, running, with the port exposed (404 for a
   * missing sandbox or a port it does not expose, 409 when it is not running), through its host.
   */
  readonly connect: (
    orgId: OrgId,
    target: PreviewTarget
  ) => Effect.Effect<
    Net.Socket,
    Errors.NotFound | Errors.Conflict | Errors.BadGateway | Errors.Unavailable | Rows.QueryError
  >
  /** The sandbox (of the org) a preview request names: for the policy checks of a key. */
  readonly sandbox: (
    orgId: OrgId,
    sandboxId: string
  ) => Effect.Effect<SandboxActorState, Errors.NotFound | Rows.QueryError>
}>()("@svc/sandboxes/Previews") {
  static readonly make = Effect.gen(function*() {
    const box = yield* SecretBox
    const sandboxes = yield* Sandboxes
    const hosts = yield* Hosts
    const domain = (yield* PreviewDomain).toLowerCase()

    /** A deleted sandbox has no ports any more; a port it does not expose is none of the preview's. */
    const exposed = (s: SandboxActorState, port: number) =>
      s.state === "deleting" || s.state === "deleted"
        ? Effect.fail(new Errors.NotFound({ error: "This sandbox is deleted" }))
        : s.exposedPorts.includes(port)
        ? Effect.void
        : Effect.fail(new Errors.NotFound({ error: `Port ${port} is not one of this sandbox's exposed ports` }))

    const mint = Effect.fn("Previews.mint")(
      function*(orgId: OrgId, sandboxId: string, port: number, ttlS: number, origin: PreviewOrigin) {
        const s = yield* sandboxes.get(orgId, sandboxId)
        yield* exposed(s, port)
        const expiresAt = Date.now() + ttlS * 1000
        const claims: TokenClaims = { orgId, sandboxId: s.id, port, expiresAt }
        const token = PREVIEW_TOKEN_PREFIX + (yield* box.seal(encodeClaims(claims), TOKEN_AAD))
        const standard = origin.port === undefined || origin.port === (origin.scheme === "https" ? 443 : 80)
        const url = `${origin.scheme}://${port}-${s.id}.${domain}${standard ? "" : `:${origin.port}`}/`
        return { url, token, expiresAt }
      }
    )

    const verify = (token: string, target: PreviewTarget) =>
      Effect.gen(function*() {
        if (!token.startsWith(PREVIEW_TOKEN_PREFIX)) return undefined
        const opened = yield* Effect.option(box.open(token.slice(PREVIEW_TOKEN_PREFIX.length), TOKEN_AAD))
        if (Option.isNone(opened)) return undefined
        const claims = decodeClaims(opened.value)
        if (Option.isNone(claims)) return undefined
        const { orgId, sandboxId, port, expiresAt } = claims.value
        if (sandboxId !== target.sandboxId || port !== target.port || expiresAt <= Date.now()) return undefined
        return orgId as OrgId
      })

    const connect = Effect.fn("Previews.connect")(function*(orgId: OrgId, target: PreviewTarget) {
      yield* exposed(yield* sandboxes.get(orgId, target.sandboxId), target.port)
      // A preview request is a call on the sandbox: a stopped one with `auto_resume` starts.
      const s = yield* sandboxes.ready(orgId, target.sandboxId)
      if (s.hostId === null) {
        return yield* new Errors.Conflict({ error: `This sandbox is ${s.state}; it must be running` })
      }
      const host = yield* hosts.get(s.hostId)
      if (Option.isNone(host)) {
        return yield* new Errors.Unavailable({ error: "The sandbox's host is not known right now; retry" })
      }
      return yield* tunnel(host.value, s.id, target.port)
    })

    return Previews.of({
      domain,
      mint,
      verify,
      connect,
      sandbox: (orgId, sandboxId) => sandboxes.get(orgId, sandboxId)
    })
  })

  /** Needs `Sandboxes`, `Hosts` and `SecretBox`. */
  static readonly layer = Layer.effect(Previews, Previews.make)
}

/** How long the agent gets to connect to the port and answer. */
const TUNNEL_OPEN_TIMEOUT_MS = 10_000

const decodeAgentError = Schema.decodeUnknownOption(
  Schema.fromJsonString(
    Schema.Union([AgentInvalid, AgentUnauthorized, AgentNotFound, AgentNotRunning, AgentFailed, AgentBadGateway])
  )
)

const urls = HttpApiClient.urlBuilder(AgentApi)

type TunnelError = Errors.NotFound | Errors.Conflict | Errors.BadGateway | Errors.Unavailable

const tunnelRefusal = (status: number, body: string): TunnelError => {
  const error = decodeAgentError(body)
  const reason = Option.isSome(error) ? error.value.reason : undefined
  switch (reason) {
    case "not_found":
      return new Errors.NotFound({ error: "No such sandbox on its host" })
    case "not_running":
      return new Errors.Conflict({ error: "This sandbox is not running" })
    case "invalid":
      return new Errors.NotFound({ error: "This port is not one of the sandbox's exposed ports" })
    default:
      return status === 502
        ? new Errors.BadGateway()
        : new Errors.Unavailable({ error: "The sandbox's host could not open the port; retry" })
  }
}

/**
 * A byte tunnel to one exposed port of the sandbox (`GET {endpoint}/sandboxes/{id}/ports/{port}/tunnel`,
 * `Upgrade: svc-tunnel`): the agent connects to the port first and answers 101 only once it is
 * connected. The socket is the caller's to end.
 */
const tunnel = (host: HostRecord, sandboxId: string, port: number) =>
  Upgrade.open(host, {
    path: urls.sandboxes.tunnel({ params: { id: sandboxId, port: String(port) } }),
    protocol: TUNNEL_PROTOCOL,
    timeoutMs: TUNNEL_OPEN_TIMEOUT_MS,
    refused: (status, body) => Effect.fail(tunnelRefusal(status, body))
  })
