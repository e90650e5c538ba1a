/**
 * A client of the OCI distribution API (what Docker Hub, GHCR, ECR and the CNCF registry speak),
 * enough to pull: a manifest (an index resolved to its linux/amd64 image), the config blob, the
 * layer blobs, each checked against its digest.
 *
 * - **HTTPS only**, trusting the system's CAs and `extraCa` (`SVC_REGISTRY_CA_FILE`).
 * - **Addresses**: every host it connects to (the registry, a token realm, a blob redirect) is
 *   resolved once and every address must be public unless `allowed` admits it
 *   (`SVC_REGISTRY_ALLOWED_SUBNETS`, the rules of webhook URLs, @svc/domain/Address); the
 *   connection goes only to a checked address (no second DNS answer to rebind).
 * - **Credentials** (`user:password`, or a bearer token) go only to hosts `mayAuthenticate`
 *   admits (a secret's `allowed_hosts`): the registry itself, and a token realm only when named
 *   too. Redirects carry none. Nothing here logs them.
 * - **Stalls**: a request with no byte for `stallMs` is cut.
 */
import { type AddressClass, classifyAddress, type FamilyRules } from "@svc/domain/Address"
import type { ImageReference } from "@svc/domain/ImageReference"
import * as dns from "node:dns"
import * as Https from "node:https"
import * as net from "node:net"
import * as Tls from "node:tls"

export class PullError extends Error {}

export type Credential =
  | { readonly _tag: "Basic"; readonly user: string; readonly password: string }
  | { readonly _tag: "Bearer"; readonly token: string }

/** A secret's value as a credential: `user:password`, or else a bearer token. */
export const credentialOf = (value: string): Credential => {
  const colon = value.indexOf(":")
  return colon > 0
    ? { _tag: "Basic", user: value.slice(0, colon), password: value.slice(colon + 1) }
    : { _tag: "Bearer", token: value }
}

export interface RegistryOptions {
  readonly allowed: FamilyRules
  /** Names answered before DNS (their addresses are checked all the same). */
  readonly hosts: RegistryHosts
  readonly extraCa: ReadonlyArray<string>
  readonly stallMs: number
  readonly credential: Credential | undefined
  /** Whether the credential may be sent to `host:port` (the secret's `allowed_hosts`). */
  readonly mayAuthenticate: (hostname: string, port: number) => boolean
  readonly signal?: AbortSignal
}

export const MEDIA = {
  index: "application/vnd.oci.image.index.v1+json",
  dockerList: "application/vnd.docker.distribution.manifest.list.v2+json",
  manifest: "application/vnd.oci.image.manifest.v1+json",
  dockerManifest: "application/vnd.docker.distribution.manifest.v2+json"
} as const

const MAX_MANIFEST = 4 * 1024 * 1024
const MAX_REDIRECTS = 5

export interface Descriptor {
  readonly mediaType: string
  readonly digest: string
  readonly size: number
  readonly platform?: { readonly architecture?: string; readonly os?: string; readonly variant?: string }
}

export interface Manifest {
  readonly digest: string
  readonly config: Descriptor
  readonly layers: ReadonlyArray<Descriptor>
}

const DIGEST = /^sha256:[0-9a-f]{64}$/

const describeClass = (verdict: AddressClass) => verdict._tag === "NonPublic" ? ` (${verdict.range})` : ""

/** Names answered before DNS (`SVC_REGISTRY_HOSTS_FILE`), as @svc/egress/HostsFile parses them. */
export type RegistryHosts = ReadonlyMap<string, ReadonlyArray<{ readonly address: string; readonly family: 4 | 6 }>>

/** Resolves `hostname` (the hosts table first) and checks every address; the checked ones. */
const checkedAddresses = async (hostname: string, allowed: FamilyRules, hosts: RegistryHosts) => {
  const literal = net.isIP(hostname) !== 0
  const listed = hosts.get(hostname.toLowerCase())
  const resolved = literal
    ? [{ address: hostname, family: net.isIPv6(hostname) ? 6 : 4 }]
    : listed !== undefined && listed.length > 0
    ? listed
    : await dns.promises.lookup(hostname, { all: true, order: "verbatim" }).catch(() => {
      throw new PullError(`the registry host ${hostname} does not resolve`)
    })
  if (resolved.length === 0) throw new PullError(`the registry host ${hostname} does not resolve`)
  for (const { address } of resolved) {
    const verdict = classifyAddress(address, allowed)
    if (verdict._tag === "NonPublic") {
      throw new PullError(
        literal
          ? `the registry host ${hostname} is not a public address${describeClass(verdict)}`
          : `the registry host ${hostname} resolves to a non-public address${describeClass(verdict)}`
      )
    }
  }
  return resolved
}

interface Answer {
  readonly status: number
  readonly headers: Record<string, string | Array<string> | undefined>
  /** The body as it arrives (for blobs), or read whole by `text`. */
  readonly body: AsyncIterable<Buffer>
  readonly close: () => void
}

/** A registry session for one image: auth negotiated once, reused for its blobs. */
export const openRegistry = (ref: ImageReference, options: RegistryOptions) => {
  const ca = options.extraCa.length > 0 ? [...Tls.rootCertificates, ...options.extraCa] : undefined
  let authorization: string | undefined

  const request = async (url: URL, headers: Record<string, string>): Promise<Answer> => {
    if (url.protocol !== "https:") throw new PullError(`the registry sent a non-HTTPS address (${url.protocol})`)
    const hostname = url.hostname.startsWith("[") ? url.hostname.slice(1, -1) : url.hostname
    const port = url.port === "" ? 443 : Number(url.port)
    const addresses = await checkedAddresses(hostname, options.allowed, options.hosts)
    const first = addresses[0]!
    return new Promise<Answer>((resolve, reject) => {
      const req = Https.request({
        host: hostname,
        port,
        path: `${url.pathname}${url.search}`,
        method: "GET",
        headers: { "user-agent": "svc-image-pull/1", ...headers },
        ...(ca !== undefined ? { ca } : {}),
        servername: net.isIP(hostname) === 0 ? hostname : undefined,
        // Only the checked address: the name is not resolved a second time.
        lookup: (_name, opts, callback) => {
          if ((opts as { all?: boolean }).all === true) {
            ;(callback as unknown as (e: null, a: ReadonlyArray<{ address: string; family: number }>) => void)(
              null,
              [{ address: first.address, family: first.family }]
            )
          } else callback(null, first.address, first.family)
        },
        agent: false,
        ...(options.signal !== undefined ? { signal: options.signal } : {})
      })
      let timer: NodeJS.Timeout | undefined
      // Once cut, a body being read ends with this, not with the socket's "aborted".
      let stalled: PullError | undefined
      const stall = () => {
        if (timer !== undefined) clearTimeout(timer)
        timer = setTimeout(() => {
          stalled = new PullError(`the pull stalled: no byte from ${hostname} for ${options.stallMs / 1000} s`)
          req.destroy(stalled)
        }, options.stallMs)
      }
      stall()
      req.on("error", (e) => {
        if (timer !== undefined) clearTimeout(timer)
        reject(
          e instanceof PullError ? e : new PullError(`the registry ${hostname} could not be reached: ${e.message}`)
        )
      })
      req.on("response", (res) => {
        stall()
        const body = (async function*() {
          try {
            for await (const chunk of res) {
              stall()
              yield chunk as Buffer
            }
            if (stalled !== undefined) throw stalled
            if (!res.complete) throw new PullError(`the registry ${hostname} closed the download early`)
          } catch (e) {
            if (stalled !== undefined) throw stalled
            throw e instanceof PullError
              ? e
              : new PullError(`the download from ${hostname} failed: ${e instanceof Error ? e.message : String(e)}`)
          } finally {
            if (timer !== undefined) clearTimeout(timer)
          }
        })()
        resolve({
          status: res.statusCode ?? 0,
          headers: res.headers,
          body,
          close: () => {
            if (timer !== undefined) clearTimeout(timer)
            res.destroy()
          }
        })
      })
      req.end()
    })
  }

  const readAll = async (answer: Answer, max: number, what: string): Promise<Buffer> => {
    const parts: Array<Buffer> = []
    let size = 0
    for await (const chunk of answer.body) {
      size += chunk.length
      if (size > max) {
        answer.close()
        throw new PullError(`${what} is larger than ${max} bytes`)
      }
      parts.push(chunk)
    }
    return Buffer.concat(parts)
  }

  const base = new URL(`https://${ref.registry}/`)
  const registryHost = { hostname: ref.hostname, port: ref.port }
  const credentialFor = (hostname: string, port: number) =>
    options.credential !== undefined && options.mayAuthenticate(hostname, port) ? options.credential : undefined

  /** The Bearer challenge's token (with the credential when the realm may have it). */
  const token = async (challenge: string): Promise<string> => {
    const params = new Map<string, string>()
    for (const m of challenge.matchAll(/(\w+)="([^"]*)"/g)) params.set(m[1]!.toLowerCase(), m[2]!)
    const realm = params.get("realm")
    if (realm === undefined) throw new PullError("the registry's auth challenge names no realm")
    const url = URL.parse(realm)
    if (url === null) throw new PullError("the registry's auth realm is not a URL")
    if (params.has("service")) url.searchParams.set("service", params.get("service")!)
    url.searchParams.set("scope", params.get("scope") ?? `repository:${ref.repository}:pull`)
    const realmPort = url.port === "" ? 443 : Number(url.port)
    const credential = credentialFor(url.hostname, realmPort)
    const headers: Record<string, string> = { accept: "application/json" }
    if (credential?._tag === "Basic") {
      headers["authorization"] = `Basic ${Buffer.from(`${credential.user}:${credential.password}`).toString("base64")}`
    }
    const answer = await request(url, headers)
    const body = await readAll(answer, 1024 * 1024, "the registry's token answer")
    if (answer.status === 401 || answer.status === 403) {
      throw new PullError(`the registry refused the credential (${answer.status} from its token service)`)
    }
    if (answer.status !== 200) throw new PullError(`the registry's token service answered ${answer.status}`)
    const parsed = JSON.parse(body.toString("utf8")) as { token?: unknown; access_token?: unknown }
    const value = typeof parsed.token === "string" ? parsed.token : parsed.access_token
    if (typeof value !== "string" || value === "") throw new PullError("the registry's token service sent no token")
    return value
  }

  /** GET on the registry, answering its auth challenge once; redirects followed without auth. */
  const get = async (path: string, accept: string | undefined): Promise<Answer> => {
    let url = new URL(path, base)
    const headers = (auth: boolean): Record<string, string> => ({
      ...(accept !== undefined ? { accept } : {}),
      ...(auth && authorization !== undefined ? { authorization } : {})
    })
    let answer = await request(url, headers(true))
    if (answer.status === 401) {
      answer.close()
      const challenge = String(answer.headers["www-authenticate"] ?? "")
      const credential = credentialFor(registryHost.hostname, registryHost.port)
      if (/^bearer\s/i.test(challenge)) {
        authorization = `Bearer ${await token(challenge)}`
      } else if (/^basic/i.test(challenge) && credential?._tag === "Basic") {
        authorization = `Basic ${Buffer.from(`${credential.user}:${credential.password}`).toString("base64")}`
      } else if (credential?._tag === "Bearer") {
        authorization = `Bearer ${credential.token}`
      } else {
        throw new PullError(
          options.credential === undefined
            ? "the registry asks for a credential (registry_secret) and none was given"
            : "the registry asks for a credential the secret cannot give"
        )
      }
      answer = await request(url, headers(true))
      if (answer.status === 401 || answer.status === 403) {
        answer.close()
        throw new PullError(`the registry refused the credential (${answer.status})`)
      }
    }
    for (let hops = 0; answer.status >= 300 && answer.status < 400 && hops < MAX_REDIRECTS; hops++) {
      answer.close()
      const location = answer.headers["location"]
      if (typeof location !== "string") throw new PullError("the registry redirected nowhere")
      const next = new URL(location, url)
      // The credential stays with the registry: a redirect elsewhere (a CDN) gets none.
      const sameOrigin = next.host === base.host
      url = next
      answer = await request(url, headers(sameOrigin))
    }
    return answer
  }

  const manifestAt = async (reference: string): Promise<{ readonly digest: string; readonly json: any }> => {
    const answer = await get(
      `/v2/${ref.repository}/manifests/${reference}`,
      [MEDIA.index, MEDIA.dockerList, MEDIA.manifest, MEDIA.dockerManifest].join(", ")
    )
    if (answer.status === 404) {
      answer.close()
      throw new PullError(`the image ${ref.repository}:${reference} was not found in ${ref.registry}`)
    }
    if (answer.status === 401 || answer.status === 403) {
      answer.close()
      throw new PullError(`the registry refused access to ${ref.repository} (${answer.status})`)
    }
    if (answer.status !== 200) {
      answer.close()
      throw new PullError(`the registry answered ${answer.status} for the manifest`)
    }
    const body = await readAll(answer, MAX_MANIFEST, "the manifest")
    const digest = `sha256:${(await import("node:crypto")).createHash("sha256").update(body).digest("hex")}`
    if (DIGEST.test(reference) && reference !== digest) {
      throw new PullError(`the manifest does not match its digest ${reference.slice(0, 19)}: tampered with`)
    }
    let json: any
    try {
      json = JSON.parse(body.toString("utf8"))
    } catch {
      throw new PullError("the manifest is not JSON")
    }
    return { digest, json }
  }

  const descriptor = (value: any, what: string): Descriptor => {
    if (
      typeof value !== "object" || value === null || typeof value.digest !== "string" || !DIGEST.test(value.digest) ||
      typeof value.size !== "number" || typeof value.mediaType !== "string"
    ) throw new PullError(`the manifest's ${what} is malformed (sha256 digests only)`)
    return value as Descriptor
  }

  /** The image's manifest for linux/amd64; `digest` is the top one's (what the reference named). */
  const manifest = async (): Promise<Manifest> => {
    const top = await manifestAt(ref.reference)
    let current = top
    const type = typeof top.json?.mediaType === "string" ? top.json.mediaType : ""
    if (type === MEDIA.index || type === MEDIA.dockerList || (type === "" && Array.isArray(top.json?.manifests))) {
      const entries: ReadonlyArray<any> = Array.isArray(top.json.manifests) ? top.json.manifests : []
      const chosen = entries.find((m) => m?.platform?.os === "linux" && m?.platform?.architecture === "amd64")
      if (chosen === undefined) {
        const offered = entries
          .map((m) => `${m?.platform?.os ?? "?"}/${m?.platform?.architecture ?? "?"}`)
          .filter((p) => p !== "unknown/unknown")
        throw new PullError(
          `the image has no linux/amd64 variant (it has ${[...new Set(offered)].join(", ") || "none"})`
        )
      }
      current = await manifestAt(descriptor(chosen, "platform entry").digest)
    }
    const json = current.json
    if (json?.schemaVersion !== 2 || !Array.isArray(json?.layers)) {
      throw new PullError("the manifest is not an OCI or Docker v2 image manifest")
    }
    return {
      digest: top.digest,
      config: descriptor(json.config, "config"),
      layers: (json.layers as ReadonlyArray<unknown>).map((l, i) => descriptor(l, `layer ${i + 1}`))
    }
  }

  /** A blob's bytes as they arrive (the caller checks the digest). */
  const blob = async (digest: string): Promise<Answer> => {
    const answer = await get(`/v2/${ref.repository}/blobs/${digest}`, undefined)
    if (answer.status !== 200) {
      answer.close()
      throw new PullError(`the registry answered ${answer.status} for blob ${digest.slice(0, 19)}`)
    }
    return answer
  }

  const blobBytes = async (digest: string, max: number, what: string): Promise<Buffer> => {
    const bytes = await readAll(await blob(digest), max, what)
    const actual = `sha256:${(await import("node:crypto")).createHash("sha256").update(bytes).digest("hex")}`
    if (actual !== digest) {
      throw new PullError(`${what} does not match its digest ${digest.slice(0, 19)}: tampered with`)
    }
    return bytes
  }

  return { manifest, blob, blobBytes }
}

export type RegistrySession = ReturnType<typeof openRegistry>
