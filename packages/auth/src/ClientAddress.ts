/**
 * Which address a request comes from, for the per-address rate limits and the audit log.
 *
 * - By default the TCP peer's address, and nothing the client sends: `X-Forwarded-For` is a
 *   header anyone can write, so believing it would let every request pick a fresh address.
 * - Behind reverse proxies the operator lists them in `SVC_TRUSTED_PROXIES` (addresses or CIDRs,
 *   comma-separated, IPv4 and IPv6). A request whose peer is one of them has its client taken
 *   from `X-Forwarded-For`, read from the right (each proxy appends the peer it saw): the first
 *   address that is not a trusted proxy. Entries a trusted proxy could not have written (not an
 *   address) end the walk at the last trusted hop.
 * - Rate limits count IPv6 clients per /64 (one host usually holds a whole /64, so counting per
 *   address would give it 2^64 buckets); IPv4-mapped IPv6 (`::ffff:1.2.3.4`) is the IPv4 address.
 */
import { BlockList, isIP, isIPv4 } from "node:net"

export interface TrustedProxies {
  /** Whether `address` (normalised) is a listed proxy. */
  readonly has: (address: string) => boolean
}

export const NO_PROXIES: TrustedProxies = { has: () => false }

/** `::ffff:1.2.3.4` → `1.2.3.4`; `[::1]` → `::1`; lowercased; undefined when not an address. */
export const normalizeAddress = (raw: string): string | undefined => {
  let a = raw.trim()
  if (a.startsWith("[")) {
    const end = a.indexOf("]")
    if (end === -1) return undefined
    a = a.slice(1, end)
  } else if (a.includes(".") && a.indexOf(":") === a.lastIndexOf(":") && a.includes(":")) {
    // `1.2.3.4:5678`: an IPv4 address with a port (some proxies write it).
    a = a.slice(0, a.indexOf(":"))
  }
  a = a.toLowerCase()
  const zone = a.indexOf("%")
  if (zone !== -1) a = a.slice(0, zone)
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/.exec(a)
  if (mapped) a = mapped[1]!
  return isIP(a) === 0 ? undefined : a
}

/** The entries of `SVC_TRUSTED_PROXIES`, each an address or a CIDR; a message for a bad one. */
export const parseTrustedProxies = (
  text: string
): { readonly ok: true; readonly entries: ReadonlyArray<string> } | {
  readonly ok: false
  readonly message: string
} => {
  const entries = text.split(",").map((s) => s.trim()).filter((s) => s.length > 0)
  for (const entry of entries) {
    const [address, prefix, ...rest] = entry.split("/")
    const normal = address === undefined ? undefined : normalizeAddress(address)
    if (normal === undefined || rest.length > 0) return { ok: false, message: `not an address or CIDR: ${entry}` }
    if (prefix !== undefined) {
      const bits = isIPv4(normal) ? 32 : 128
      if (!/^\d{1,3}$/.test(prefix) || Number(prefix) > bits) {
        return { ok: false, message: `bad prefix length: ${entry}` }
      }
    }
  }
  return { ok: true, entries }
}

/** The lookup for entries `parseTrustedProxies` accepted. */
export const trustedProxies = (entries: ReadonlyArray<string>): TrustedProxies => {
  if (entries.length === 0) return NO_PROXIES
  const list = new BlockList()
  for (const entry of entries) {
    const [address, prefix] = entry.split("/")
    const normal = normalizeAddress(address!)!
    const type = isIPv4(normal) ? "ipv4" : "ipv6"
    if (prefix === undefined) list.addAddress(normal, type)
    else list.addSubnet(normal, Number(prefix), type)
  }
  return { has: (address) => list.check(address, isIPv4(address) ? "ipv4" : "ipv6") }
}

/**
 * The client's address: the peer's, or behind trusted proxies the right-most untrusted entry of
 * `X-Forwarded-For`. Undefined only when the peer is unknown (not a TCP socket).
 */
export const clientAddress = (
  peer: string | undefined,
  forwardedFor: string | undefined,
  proxies: TrustedProxies
): string | undefined => {
  let current = peer === undefined ? undefined : normalizeAddress(peer)
  if (current === undefined || forwardedFor === undefined || !proxies.has(current)) return current
  const hops = forwardedFor.split(",")
  for (let i = hops.length - 1; i >= 0 && proxies.has(current); i--) {
    const hop = normalizeAddress(hops[i]!)
    if (hop === undefined) break
    current = hop
  }
  return current
}

/** What the per-address limits count by: the address, or an IPv6 address's /64. */
export const rateKey = (address: string | undefined): string => {
  if (address === undefined) return "unknown"
  if (isIPv4(address)) return address
  // Expand `::` to count groups: the first four groups are the /64.
  const [head = "", tail] = address.split("::")
  const left = head === "" ? [] : head.split(":")
  const right = tail === undefined || tail === "" ? [] : tail.split(":")
  const groups = tail === undefined ? left : [...left, ...Array(8 - left.length - right.length).fill("0"), ...right]
  return `${groups.slice(0, 4).map((g) => g.replace(/^0+(?=.)/, "")).join(":")}::/64`
}
