/**
 * What the first bytes of a connection say (pure): the PROXY protocol v1 line the front sends,
 * a TLS ClientHello's server name, whether it is HTTP.
 */
import * as net from "node:net"

export interface ProxyHeader {
  readonly source: string
  readonly destination: string
  readonly sourcePort: number
  readonly destinationPort: number
  /** Bytes after the line (the client's first bytes, if any arrived with it). */
  readonly rest: Buffer
}

/** `PROXY TCP4 src dst sport dport\r\n`; undefined while incomplete, an Error when malformed. */
export const parseProxyHeader = (buffer: Buffer): ProxyHeader | Error | undefined => {
  const end = buffer.indexOf("\r\n")
  if (end === -1) return buffer.length > 108 ? new Error("PROXY line too long") : undefined
  const parts = buffer.subarray(0, end).toString("latin1").split(" ")
  const [tag, family, source, destination, sport, dport] = parts
  if (tag !== "PROXY" || (family !== "TCP4" && family !== "TCP6") || parts.length !== 6) {
    return new Error("not a PROXY v1 line")
  }
  if (net.isIP(source ?? "") === 0 || net.isIP(destination ?? "") === 0) return new Error("bad PROXY addresses")
  return {
    source: source!,
    destination: destination!,
    sourcePort: Number(sport),
    destinationPort: Number(dport),
    rest: buffer.subarray(end + 2)
  }
}

export type Hello =
  | { readonly _tag: "Incomplete" }
  | { readonly _tag: "NotTls" }
  | { readonly _tag: "Hello"; readonly serverName: string | undefined }

const HOST_NAME = /^(?=.{1,253}$)[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)*$/

/** A host name as the proxy takes it (lowercase, no trailing dot), or undefined when it is not one. */
export const normalizeName = (name: string): string | undefined => {
  const lower = name.toLowerCase().replace(/\.$/, "")
  return HOST_NAME.test(lower) ? lower : undefined
}

/** The server name of a ClientHello in the first TLS record (the SNI extension). */
export const parseClientHello = (buffer: Buffer): Hello => {
  if (buffer.length < 1) return { _tag: "Incomplete" }
  if (buffer[0] !== 0x16) return { _tag: "NotTls" }
  if (buffer.length < 5) return { _tag: "Incomplete" }
  const recordEnd = 5 + buffer.readUInt16BE(3)
  if (buffer.length < recordEnd) return recordEnd > 5 + 16_384 + 2048 ? { _tag: "NotTls" } : { _tag: "Incomplete" }
  const hello = buffer.subarray(5, recordEnd)
  try {
    if (hello[0] !== 0x01) return { _tag: "NotTls" }
    let offset = 4 + 2 + 32
    offset += 1 + hello[offset]!
    offset += 2 + hello.readUInt16BE(offset)
    offset += 1 + hello[offset]!
    if (offset + 2 > hello.length) return { _tag: "Hello", serverName: undefined }
    const extensionsEnd = Math.min(hello.length, offset + 2 + hello.readUInt16BE(offset))
    offset += 2
    while (offset + 4 <= extensionsEnd) {
      const type = hello.readUInt16BE(offset)
      const length = hello.readUInt16BE(offset + 2)
      const data = hello.subarray(offset + 4, offset + 4 + length)
      if (type === 0 && data.length >= 5 && data[2] === 0) {
        const nameLength = data.readUInt16BE(3)
        const name = normalizeName(data.subarray(5, 5 + nameLength).toString("latin1"))
        return { _tag: "Hello", serverName: name }
      }
      offset += 4 + length
    }
    return { _tag: "Hello", serverName: undefined }
  } catch {
    return { _tag: "NotTls" }
  }
}

/** An HTTP/1 request line starts with a method token and a space. */
export const looksLikeHttp = (buffer: Buffer): boolean | undefined => {
  const head = buffer.subarray(0, 16).toString("latin1")
  if (/^[A-Z]{3,10} /.test(head)) return true
  return /^[A-Z]{0,10}$/.test(head) ? undefined : false
}

/** The name (or IP literal) and port of a Host header. */
export const parseHostHeader = (
  value: string | undefined
): { readonly host: string; readonly literal: boolean } | undefined => {
  if (value === undefined) return undefined
  const text = value.trim()
  const bracketed = /^\[([0-9a-fA-F:.]+)\](?::\d{1,5})?$/.exec(text)
  if (bracketed !== null) return net.isIPv6(bracketed[1]!) ? { host: bracketed[1]!, literal: true } : undefined
  const plain = /^([^:]+)(?::\d{1,5})?$/.exec(text)
  if (plain === null) return undefined
  if (net.isIPv4(plain[1]!)) return { host: plain[1]!, literal: true }
  const name = normalizeName(plain[1]!)
  return name === undefined ? undefined : { host: name, literal: false }
}
