/**
 * Image references as `docker pull` reads them: `[registry[:port]/]repository[:tag][@sha256:<hex>]`.
 * The first component is a registry when it has a `.` or a `:` or is `localhost`; otherwise the
 * image is on Docker Hub (`registry-1.docker.io`, one-component names under `library/`). Pure.
 */
import { Result } from "effect"

export interface ImageReference {
  /** `host` or `host:port`, as the registry is addressed (and as a secret's `allowed_hosts` names it). */
  readonly registry: string
  readonly hostname: string
  readonly port: number
  readonly repository: string
  readonly tag: string | undefined
  /** `sha256:<hex>` when the reference pins one. */
  readonly digest: string | undefined
  /** What is asked of the registry: the digest when pinned, else the tag (`latest` by default). */
  readonly reference: string
}

const COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/
const TAG = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/
const DIGEST = /^sha256:[0-9a-f]{64}$/
const HOST = /^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/
const IPV4 = /^\d{1,3}(?:\.\d{1,3}){3}$/

export const DOCKER_HUB = "registry-1.docker.io"

/** Parses a reference; the failure says what is wrong with it. */
export const parseImageReference = (input: string): Result.Result<ImageReference, string> => {
  if (input.length === 0 || input.length > 512) return Result.fail("an image reference of 1 to 512 characters")
  if (/\s/.test(input)) return Result.fail("an image reference has no spaces")
  let rest = input
  let digest: string | undefined
  const at = rest.indexOf("@")
  if (at >= 0) {
    digest = rest.slice(at + 1)
    rest = rest.slice(0, at)
    if (!DIGEST.test(digest)) return Result.fail("the digest after @ must be sha256:<64 hex digits>")
  }
  const slash = rest.indexOf("/")
  const first = slash >= 0 ? rest.slice(0, slash) : ""
  const isRegistry = slash >= 0 && (first.includes(".") || first.includes(":") || first === "localhost")
  let registry = isRegistry ? first : DOCKER_HUB
  let path = isRegistry ? rest.slice(slash + 1) : rest
  let tag: string | undefined
  const colon = path.lastIndexOf(":")
  if (colon >= 0) {
    tag = path.slice(colon + 1)
    path = path.slice(0, colon)
    if (!TAG.test(tag)) return Result.fail("the tag must be 1 to 128 of [A-Za-z0-9_.-], not starting with . or -")
  }
  if (path.length === 0 || path.length > 255) return Result.fail("the repository name must be 1 to 255 characters")
  const components = path.split("/")
  if (!components.every((c) => COMPONENT.test(c))) {
    return Result.fail("the repository name must be lowercase components of [a-z0-9._-] separated by /")
  }
  if (registry === "docker.io" || registry === "index.docker.io") registry = DOCKER_HUB
  if (registry === DOCKER_HUB && components.length === 1) path = `library/${path}`
  let hostname = registry
  let port = 443
  const bracket = /^\[([0-9a-fA-F:]+)\](?::(\d{1,5}))?$/.exec(registry)
  if (bracket !== null) {
    hostname = bracket[1]!
    port = bracket[2] !== undefined ? Number(bracket[2]) : 443
  } else {
    const portAt = registry.lastIndexOf(":")
    if (portAt >= 0) {
      hostname = registry.slice(0, portAt)
      const text = registry.slice(portAt + 1)
      if (!/^\d{1,5}$/.test(text)) return Result.fail("the registry's port must be a number")
      port = Number(text)
    }
    if (!HOST.test(hostname) && !IPV4.test(hostname)) return Result.fail("the registry must be a host name")
  }
  if (port < 1 || port > 65535) return Result.fail("the registry's port must be 1 to 65535")
  return Result.succeed({
    registry,
    hostname,
    port,
    repository: path,
    tag,
    digest,
    reference: digest ?? tag ?? "latest"
  })
}

/** The reference written back in full (`registry/repository:tag@digest`), as the record shows it. */
export const formatImageReference = (ref: ImageReference): string =>
  `${ref.registry}/${ref.repository}${ref.tag !== undefined ? `:${ref.tag}` : ""}${
    ref.digest !== undefined ? `@${ref.digest}` : ""
  }${ref.tag === undefined && ref.digest === undefined ? ":latest" : ""}`
