/**
 * The sandboxes' DNS resolver: UDP 53 of every sandbox is redirected here by the firewall, and
 * TCP 53 arrives through the proxy. A name in `SVC_EGRESS_HOSTS_FILE` is answered from the file
 * (A and AAAA); any other query is passed as it is to the host's own name servers and their
 * answer returned. The proxy never trusts these answers: it resolves names again itself and
 * checks the address it connects to. It does remember them (`ResolvedNames`): a sandbox that
 * connects to an address by itself is refused by a `deny_out` domain rule whose name this
 * resolver (or the proxy) answered with that address.
 */
import * as Dgram from "node:dgram"
import * as Dns from "node:dns"
import * as net from "node:net"
import type { HostsTable } from "./HostsFile.ts"

const TYPE_A = 1
const TYPE_AAAA = 28
const CLASS_IN = 1
const UPSTREAM_TIMEOUT_MS = 3_000

export interface Question {
  readonly id: number
  readonly name: string
  readonly type: number
  readonly class: number
  /** Offset just past the question. */
  readonly end: number
}

/** Pure: the first question of a query; undefined when it is not one. */
export const parseQuery = (message: Uint8Array): Question | undefined => {
  if (message.length < 12) return undefined
  const view = Buffer.from(message.buffer, message.byteOffset, message.byteLength)
  const flags = view.readUInt16BE(2)
  if ((flags & 0x8000) !== 0 || view.readUInt16BE(4) < 1) return undefined
  const labels: Array<string> = []
  let offset = 12
  for (;;) {
    if (offset >= view.length) return undefined
    const length = view[offset]!
    offset++
    if (length === 0) break
    if (length > 63 || offset + length > view.length) return undefined
    labels.push(view.subarray(offset, offset + length).toString("latin1"))
    offset += length
  }
  if (offset + 4 > view.length) return undefined
  return {
    id: view.readUInt16BE(0),
    name: labels.join(".").toLowerCase(),
    type: view.readUInt16BE(offset),
    class: view.readUInt16BE(offset + 2),
    end: offset + 4
  }
}

/** Pure: the answer to `query` from the hosts table, or undefined when the name is not in it. */
export const answerFromHosts = (query: Uint8Array, hosts: HostsTable): Buffer | undefined => {
  const question = parseQuery(query)
  if (question === undefined) return undefined
  const entries = hosts.get(question.name)
  if (entries === undefined) return undefined
  const wanted = question.class !== CLASS_IN ?
    [] :
    entries.filter((entry) =>
      (question.type === TYPE_A && entry.family === 4) || (question.type === TYPE_AAAA && entry.family === 6)
    )
  const header = Buffer.alloc(12)
  header.writeUInt16BE(question.id, 0)
  // QR, opcode 0, AA, RD copied, RA; rcode 0 (the name exists, perhaps without this type).
  const rd = Buffer.from(query).readUInt16BE(2) & 0x0100
  header.writeUInt16BE(0x8000 | 0x0400 | rd | 0x0080, 2)
  header.writeUInt16BE(1, 4)
  header.writeUInt16BE(wanted.length, 6)
  const answers = wanted.map((entry) => {
    const data = entry.family === 4
      ? Buffer.from(entry.address.split(".").map(Number))
      : ipv6Bytes(entry.address)
    const record = Buffer.alloc(12)
    record.writeUInt16BE(0xc00c, 0) // the question's name
    record.writeUInt16BE(entry.family === 4 ? TYPE_A : TYPE_AAAA, 2)
    record.writeUInt16BE(CLASS_IN, 4)
    record.writeUInt32BE(60, 6)
    record.writeUInt16BE(data.length, 10)
    return Buffer.concat([record, data])
  })
  return Buffer.concat([header, Buffer.from(query).subarray(12, question.end), ...answers])
}

const ipv6Bytes = (address: string): Buffer => {
  const list = new net.SocketAddress({ address, family: "ipv6" })
  const [head, tail] = list.address.split("::") as [string, string | undefined]
  const left = head === "" ? [] : head.split(":")
  const right = tail === undefined || tail === "" ? [] : tail.split(":")
  const groups = [...left, ...Array(8 - left.length - right.length).fill("0"), ...right]
  const out = Buffer.alloc(16)
  groups.forEach((group, i) => out.writeUInt16BE(parseInt(group, 16), i * 2))
  return out
}

/** Skips a (possibly compressed) name; the offset past it, or undefined when malformed. */
const skipName = (view: Buffer, start: number): number | undefined => {
  let offset = start
  for (let hops = 0; hops < 128; hops++) {
    if (offset >= view.length) return undefined
    const length = view[offset]!
    if (length === 0) return offset + 1
    if ((length & 0xc0) === 0xc0) return offset + 2 <= view.length ? offset + 2 : undefined
    if (length > 63) return undefined
    offset += 1 + length
  }
  return undefined
}

/**
 * Pure: the question's name of an answer and every A/AAAA address in its answer section (a
 * CNAME chain's final addresses included: what the resolver gave for that name).
 */
export const answerAddresses = (
  message: Uint8Array
): { readonly name: string; readonly addresses: ReadonlyArray<string> } | undefined => {
  if (message.length < 12) return undefined
  const view = Buffer.from(message.buffer, message.byteOffset, message.byteLength)
  if ((view.readUInt16BE(2) & 0x8000) === 0 || view.readUInt16BE(4) !== 1) return undefined
  const question = parseQuery(Buffer.concat([view.subarray(0, 2), Buffer.from([0, 0]), view.subarray(4)]))
  if (question === undefined) return undefined
  const addresses: Array<string> = []
  let offset: number | undefined = question.end
  for (let i = 0; i < view.readUInt16BE(6); i++) {
    offset = skipName(view, offset)
    if (offset === undefined || offset + 10 > view.length) break
    const type = view.readUInt16BE(offset)
    const length = view.readUInt16BE(offset + 8)
    const data = view.subarray(offset + 10, offset + 10 + length)
    if (data.length !== length) break
    if (type === TYPE_A && length === 4) addresses.push([...data].join("."))
    if (type === TYPE_AAAA && length === 16) {
      addresses.push(new net.SocketAddress({ address: ipv6Text(data), family: "ipv6" }).address)
    }
    offset += 10 + length
  }
  return { name: question.name, addresses }
}

const ipv6Text = (bytes: Buffer): string => {
  const groups: Array<string> = []
  for (let i = 0; i < 16; i += 2) groups.push(bytes.readUInt16BE(i).toString(16))
  return groups.join(":")
}

/** How long an answer is remembered: longer than clients cache it (they often ignore TTLs). */
const REMEMBER_MS = 60 * 60 * 1000
const MAX_REMEMBERED = 50_000

/**
 * Which names the platform's resolvers answered with an address, recently: bounded (the oldest
 * address forgotten first) and shared by the resolver and the proxy of one agent.
 */
export class ResolvedNames {
  private readonly byAddress = new Map<string, Map<string, number>>()

  record(name: string, addresses: ReadonlyArray<string>, now = Date.now()): void {
    for (const address of addresses) {
      const names = this.byAddress.get(address) ?? new Map<string, number>()
      this.byAddress.delete(address) // re-inserted last: Map order is the eviction order
      names.set(name, now + REMEMBER_MS)
      if (names.size > 64) names.delete(names.keys().next().value!)
      this.byAddress.set(address, names)
    }
    while (this.byAddress.size > MAX_REMEMBERED) this.byAddress.delete(this.byAddress.keys().next().value!)
  }

  namesOf(address: string, now = Date.now()): ReadonlyArray<string> {
    const names = this.byAddress.get(address)
    if (names === undefined) return []
    return [...names].flatMap(([name, until]) => (until > now ? [name] : []))
  }
}

/** SERVFAIL for a query the resolver could not answer. */
const failure = (query: Uint8Array): Buffer | undefined => {
  const question = parseQuery(query)
  if (question === undefined) return undefined
  const header = Buffer.alloc(12)
  header.writeUInt16BE(question.id, 0)
  header.writeUInt16BE(0x8000 | 0x0080 | (Buffer.from(query).readUInt16BE(2) & 0x0100) | 2, 2)
  header.writeUInt16BE(1, 4)
  return Buffer.concat([header, Buffer.from(query).subarray(12, question.end)])
}

/** Passes a query to the host's first name server and returns its answer (SERVFAIL on none). */
const forward = (query: Uint8Array): Promise<Buffer | undefined> =>
  new Promise((resolve) => {
    const server = Dns.getServers()[0]
    if (server === undefined) return resolve(failure(query))
    const bracketed = /^\[(.*)\](?::(\d+))?$/.exec(server)
    const address = bracketed?.[1] ?? server.replace(/:\d+$/, "")
    const port = Number(bracketed?.[2] ?? (net.isIPv6(server) ? 53 : (/:(\d+)$/.exec(server)?.[1] ?? 53)))
    const socket = Dgram.createSocket(net.isIPv6(address) ? "udp6" : "udp4")
    const done = (answer: Buffer | undefined) => {
      clearTimeout(timer)
      socket.close()
      resolve(answer)
    }
    const timer = setTimeout(() => done(failure(query)), UPSTREAM_TIMEOUT_MS)
    socket.on("error", () => done(failure(query)))
    socket.on("message", (answer) => done(answer))
    socket.send(query, port, address)
  })

/** One query → its answer (undefined: not a query, dropped); the answer's addresses remembered. */
export const resolveQuery = async (
  query: Uint8Array,
  hosts: () => HostsTable,
  resolved?: ResolvedNames
): Promise<Buffer | undefined> => {
  if (parseQuery(query) === undefined) return undefined
  const answer = answerFromHosts(query, hosts()) ?? await forward(query)
  const given = answer === undefined ? undefined : answerAddresses(answer)
  if (given !== undefined && given.addresses.length > 0) resolved?.record(given.name, given.addresses)
  return answer
}

/** The UDP resolver on `address:port`; resolves once bound. */
export const startUdpResolver = (
  address: string,
  port: number,
  hosts: () => HostsTable,
  resolved?: ResolvedNames
): Promise<Dgram.Socket> =>
  new Promise((resolve, reject) => {
    const socket = Dgram.createSocket({ type: "udp4", reuseAddr: false })
    socket.once("error", reject)
    socket.on("message", (query, from) => {
      void resolveQuery(query, hosts, resolved).then((answer) => {
        if (answer !== undefined) socket.send(answer, from.port, from.address)
      }, () => undefined)
    })
    socket.bind(port, address, () => {
      socket.off("error", reject)
      socket.on("error", () => undefined)
      resolve(socket)
    })
  })

/** DNS over TCP (RFC 1035 4.2.2: each message behind its 2-byte length) on one connection. */
export const serveTcpDns = (
  socket: net.Socket,
  hosts: () => HostsTable,
  initial: Buffer,
  resolved?: ResolvedNames
): void => {
  let pending = initial
  const drain = () => {
    while (pending.length >= 2) {
      const length = pending.readUInt16BE(0)
      if (pending.length < 2 + length) return
      const query = pending.subarray(2, 2 + length)
      pending = pending.subarray(2 + length)
      void resolveQuery(query, hosts, resolved).then((answer) => {
        if (answer === undefined || socket.destroyed) return
        const prefix = Buffer.alloc(2)
        prefix.writeUInt16BE(answer.length)
        socket.write(Buffer.concat([prefix, answer]))
      }, () => undefined)
    }
  }
  socket.on("data", (chunk: Buffer) => {
    pending = Buffer.concat([pending, chunk])
    if (pending.length > 70_000) return void socket.destroy()
    drain()
  })
  socket.on("error", () => undefined)
  socket.setTimeout(30_000, () => socket.destroy())
  drain()
  socket.resume()
}
