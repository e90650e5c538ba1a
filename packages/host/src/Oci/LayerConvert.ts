/**
 * An OCI layer (a tar stream, already decompressed) rewritten as a platform layer
 * (`ImageLayers.ts`: a tar of an overlay upper folder, owners as seen inside a sandbox):
 *
 * - whiteouts: `dir/.wh.name` becomes the overlay whiteout `dir/name` (a character device 0:0);
 *   the opaque marker `dir/.wh..wh..opq` becomes the `trusted.overlay.opaque` xattr of `dir`
 *   (the folder entry written again with it; tar applies the later entry's attributes);
 * - owners above 65535 (outside a sandbox's range) become 65534 (`nobody`);
 * - device nodes are dropped (no sandbox may hold one; it has no `MKNOD` either), and so is
 *   anything under `proc/`, `sys/` and `dev/` but the folders (the sandbox mounts its own), and
 *   `etc/resolv.conf`, `etc/hosts` and `etc/hostname` (the platform writes those, as Docker does);
 * - setuid and setgid bits are kept: every exec runs with `no_new_privs`, so they grant nothing;
 * - a name or a hard link's target with a `..` component, or a type tar cannot express here
 *   (sparse, multi-volume), refuses the whole layer.
 *
 * Written as pax (POSIX.1-2001): long names, large sizes and xattrs in extended headers. The
 * content of `etc/passwd` and `etc/group` seen in the layer is returned (the image's `User` is a
 * name to look up there). Streaming: neither the input nor the output is held whole.
 */

const BLOCK = 512
const MAX_PAX = 1024 * 1024
const MAX_ACCOUNT_FILE = 1024 * 1024
const NOBODY = 65534
const DROPPED_FILES = new Set(["etc/resolv.conf", "etc/hosts", "etc/hostname"])
const XATTR_PREFIX = "SCHILY.xattr."
const KEPT_XATTRS = new Set(["security.capability", "user.", "trusted.overlay.opaque"])

export class LayerRefused extends Error {}

export interface ConvertedLayer {
  /** `etc/passwd` / `etc/group` as this layer leaves them: text, `null` (removed), absent (untouched). */
  readonly passwd?: string | null
  readonly group?: string | null
  readonly entries: number
}

/** Bytes from an async source, read exactly. */
class Reader {
  private chunks: Array<Buffer> = []
  private length = 0
  private done = false
  private readonly source: AsyncIterator<Buffer | Uint8Array>
  constructor(source: AsyncIterator<Buffer | Uint8Array>) {
    this.source = source
  }
  private async fill(n: number): Promise<boolean> {
    while (this.length < n && !this.done) {
      const next = await this.source.next()
      if (next.done) this.done = true
      else if (next.value.length > 0) {
        const buf = Buffer.isBuffer(next.value) ? next.value : Buffer.from(next.value)
        this.chunks.push(buf)
        this.length += buf.length
      }
    }
    return this.length >= n
  }
  /** Exactly `n` bytes, or `undefined` at a clean end (no byte left). */
  async read(n: number): Promise<Buffer | undefined> {
    if (!(await this.fill(n))) {
      if (this.length === 0) return undefined
      throw new LayerRefused("the layer's tar ends in the middle of an entry")
    }
    const all = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks)
    const out = all.subarray(0, n)
    const rest = all.subarray(n)
    this.chunks = rest.length > 0 ? [rest] : []
    this.length = rest.length
    return out
  }
  /** Up to `n` bytes (at least one), for streaming an entry's content. */
  async some(n: number): Promise<Buffer> {
    if (!(await this.fill(1))) throw new LayerRefused("the layer's tar ends in the middle of an entry")
    const first = this.chunks[0]!
    if (first.length <= n) {
      this.chunks.shift()
      this.length -= first.length
      return first
    }
    this.chunks[0] = first.subarray(n)
    this.length -= n
    return first.subarray(0, n)
  }
}

const cString = (buf: Buffer, start: number, length: number) => {
  const slice = buf.subarray(start, start + length)
  const nul = slice.indexOf(0)
  return (nul >= 0 ? slice.subarray(0, nul) : slice).toString("utf8")
}

const numeric = (buf: Buffer, start: number, length: number): number => {
  const field = buf.subarray(start, start + length)
  if ((field[0]! & 0x80) !== 0) {
    // base-256 (GNU): big-endian, the top bit a flag.
    let value = field[0]! & 0x7f
    for (let i = 1; i < field.length; i++) value = value * 256 + field[i]!
    return value
  }
  const text = cString(buf, start, length).trim()
  if (text === "") return 0
  if (!/^[0-7]+$/.test(text)) throw new LayerRefused("a tar header has a malformed number")
  return parseInt(text, 8)
}

const parsePax = (body: Buffer): Map<string, string> => {
  const records = new Map<string, string>()
  let at = 0
  while (at < body.length) {
    const space = body.indexOf(0x20, at)
    if (space < 0) break
    const length = Number(body.subarray(at, space).toString("ascii"))
    if (!Number.isInteger(length) || length <= 0 || at + length > body.length) {
      throw new LayerRefused("a pax header is malformed")
    }
    const record = body.subarray(space + 1, at + length - 1).toString("utf8")
    const eq = record.indexOf("=")
    if (eq > 0) records.set(record.slice(0, eq), record.slice(eq + 1))
    at += length
  }
  return records
}

/** `./a//b/` → `a/b`; `..` anywhere refuses the layer. */
const normalize = (name: string): string => {
  const parts = name.split("/").filter((p) => p !== "" && p !== ".")
  if (parts.includes("..")) throw new LayerRefused(`the layer names a path with "..": ${name.slice(0, 200)}`)
  return parts.join("/")
}

interface Entry {
  readonly name: string
  readonly type: string
  readonly mode: number
  readonly uid: number
  readonly gid: number
  readonly size: number
  readonly mtime: number
  readonly linkname: string
  readonly devmajor: number
  readonly devminor: number
  readonly xattrs: ReadonlyMap<string, string>
}

const paxRecord = (key: string, value: string): Buffer => {
  const body = ` ${key}=${value}\n`
  const bodyLength = Buffer.byteLength(body)
  let length = bodyLength + 1
  while (String(length).length + bodyLength !== length) length = String(length).length + bodyLength
  return Buffer.from(`${length}${body}`, "utf8")
}

const octal = (value: number, length: number) => value.toString(8).padStart(length - 1, "0") + "\0"

const header = (fields: {
  name: string
  mode: number
  uid: number
  gid: number
  size: number
  mtime: number
  type: string
  linkname: string
  devmajor: number
  devminor: number
}): Buffer => {
  const buf = Buffer.alloc(BLOCK)
  buf.write(fields.name.slice(0, 100), 0, 100, "utf8")
  buf.write(octal(fields.mode & 0o7777, 8), 100, 8, "ascii")
  buf.write(octal(fields.uid, 8), 108, 8, "ascii")
  buf.write(octal(fields.gid, 8), 116, 8, "ascii")
  buf.write(octal(fields.size, 12), 124, 12, "ascii")
  buf.write(octal(Math.max(0, Math.min(fields.mtime, 0o77777777777)), 12), 136, 12, "ascii")
  buf.write("        ", 148, 8, "ascii")
  buf.write(fields.type, 156, 1, "ascii")
  buf.write(fields.linkname.slice(0, 100), 157, 100, "utf8")
  buf.write("ustar\0", 257, 6, "ascii")
  buf.write("00", 263, 2, "ascii")
  buf.write(octal(fields.devmajor, 8), 329, 8, "ascii")
  buf.write(octal(fields.devminor, 8), 337, 8, "ascii")
  let sum = 0
  for (const byte of buf) sum += byte
  buf.write(octal(sum, 7) + " ", 148, 8, "ascii")
  return buf
}

const padding = (size: number) => Buffer.alloc((BLOCK - (size % BLOCK)) % BLOCK)

const fitsUstar = (text: string) => Buffer.byteLength(text) <= 100 && /^[\x20-\x7e]*$/.test(text)

/**
 * Reads the OCI layer tar from `input` and writes the platform layer tar through `write` (which
 * may wait, for backpressure).
 */
export const convertLayer = async (
  input: AsyncIterable<Buffer | Uint8Array>,
  write: (chunk: Buffer) => Promise<void> | void
): Promise<ConvertedLayer> => {
  const reader = new Reader(input[Symbol.asyncIterator]())
  const dirs = new Map<string, Entry>()
  let passwd: string | null | undefined
  let group: string | null | undefined
  let entries = 0
  let pax = new Map<string, string>()
  let longName: string | undefined
  let longLink: string | undefined

  const emit = async (entry: Entry, content?: AsyncIterable<Buffer>) => {
    const records: Array<Buffer> = []
    const name = entry.type === "5" ? `${entry.name}/` : entry.name
    if (!fitsUstar(name)) records.push(paxRecord("path", name))
    if (entry.linkname !== "" && !fitsUstar(entry.linkname)) records.push(paxRecord("linkpath", entry.linkname))
    if (entry.size > 0o77777777777) records.push(paxRecord("size", String(entry.size)))
    for (const [key, value] of entry.xattrs) records.push(paxRecord(`${XATTR_PREFIX}${key}`, value))
    if (records.length > 0) {
      const body = Buffer.concat(records)
      await write(header({
        name: "././@PaxHeader",
        mode: 0o644,
        uid: 0,
        gid: 0,
        size: body.length,
        mtime: entry.mtime,
        type: "x",
        linkname: "",
        devmajor: 0,
        devminor: 0
      }))
      await write(body)
      await write(padding(body.length))
    }
    await write(header({ ...entry, name, size: entry.size > 0o77777777777 ? 0 : entry.size }))
    if (content !== undefined) {
      for await (const chunk of content) await write(chunk)
      await write(padding(entry.size))
    }
    entries++
  }

  /** The entry's content, streamed (then the padding skipped). */
  async function* contentOf(size: number): AsyncGenerator<Buffer> {
    let left = size
    while (left > 0) {
      const chunk = await reader.some(Math.min(left, 1024 * 1024))
      left -= chunk.length
      yield chunk
    }
    const pad = (BLOCK - (size % BLOCK)) % BLOCK
    if (pad > 0) await reader.read(pad)
  }
  const skip = async (size: number) => {
    for await (const _ of contentOf(size)) { /* discarded */ }
  }
  const collect = async (size: number, max: number): Promise<Buffer | undefined> => {
    if (size > max) {
      await skip(size)
      return undefined
    }
    const parts: Array<Buffer> = []
    for await (const chunk of contentOf(size)) parts.push(Buffer.from(chunk))
    return Buffer.concat(parts)
  }

  for (;;) {
    const block = await reader.read(BLOCK)
    if (block === undefined) break
    if (block.every((b) => b === 0)) break
    const sum = numeric(block, 148, 8)
    let computed = 0
    for (let i = 0; i < BLOCK; i++) computed += i >= 148 && i < 156 ? 0x20 : block[i]!
    if (sum !== computed) throw new LayerRefused("a tar header's checksum does not match")
    const type = String.fromCharCode(block[156]!) === "\0" ? "0" : String.fromCharCode(block[156]!)
    let size = numeric(block, 124, 12)
    if (type === "x" || type === "g" || type === "L" || type === "K") {
      const body = await collect(size, MAX_PAX)
      if (body === undefined) throw new LayerRefused("a tar extended header is too large")
      if (type === "x") pax = parsePax(body)
      else if (type === "L") longName = cString(body, 0, body.length)
      else if (type === "K") longLink = cString(body, 0, body.length)
      continue
    }
    const magic = block.subarray(257, 263).toString("ascii")
    const prefix = magic.startsWith("ustar") ? cString(block, 345, 155) : ""
    const rawName = pax.get("path") ?? longName ?? (prefix !== "" ? `${prefix}/` : "") + cString(block, 0, 100)
    const rawLink = pax.get("linkpath") ?? longLink ?? cString(block, 157, 100)
    if (pax.has("size")) size = Number(pax.get("size"))
    const xattrs = new Map<string, string>()
    for (const [key, value] of pax) {
      if (!key.startsWith(XATTR_PREFIX)) continue
      const attr = key.slice(XATTR_PREFIX.length)
      if (KEPT_XATTRS.has(attr) || attr.startsWith("user.")) xattrs.set(attr, value)
    }
    const paxUid = pax.get("uid")
    const paxGid = pax.get("gid")
    pax = new Map()
    longName = undefined
    longLink = undefined
    if (!["0", "7", "1", "2", "3", "4", "5", "6"].includes(type)) {
      throw new LayerRefused(`the layer has a tar entry of type ${JSON.stringify(type)}, which is not supported`)
    }
    const name = normalize(rawName)
    const owner = (id: number) => (Number.isInteger(id) && id >= 0 && id <= 65535 ? id : NOBODY)
    const entry: Entry = {
      name,
      type: type === "7" ? "0" : type,
      mode: numeric(block, 100, 8),
      uid: owner(paxUid !== undefined ? Number(paxUid) : numeric(block, 108, 8)),
      gid: owner(paxGid !== undefined ? Number(paxGid) : numeric(block, 116, 8)),
      size: type === "0" || type === "7" ? size : 0,
      mtime: Math.floor(numeric(block, 136, 12)),
      linkname: type === "1" ? normalize(rawLink) : type === "2" ? rawLink : "",
      devmajor: 0,
      devminor: 0,
      xattrs
    }
    const dataSize = type === "0" || type === "7" ? size : 0
    if (name === "") {
      // The layer's root folder itself: its attributes are not the image's to set.
      await skip(dataSize)
      continue
    }
    const slash = name.lastIndexOf("/")
    const parent = slash >= 0 ? name.slice(0, slash) : ""
    const base = slash >= 0 ? name.slice(slash + 1) : name
    if (base === ".wh..wh..opq") {
      await skip(dataSize)
      if (parent === "") continue
      const dir = dirs.get(parent) ??
        { ...entry, name: parent, type: "5", mode: 0o755, uid: 0, gid: 0, size: 0, linkname: "", xattrs: new Map() }
      const marked: Entry = { ...dir, xattrs: new Map([...dir.xattrs, ["trusted.overlay.opaque", "y"]]) }
      dirs.set(parent, marked)
      await emit(marked)
      continue
    }
    if (base.startsWith(".wh.")) {
      await skip(dataSize)
      const hidden = parent === "" ? base.slice(4) : `${parent}/${base.slice(4)}`
      if (hidden === "etc/passwd") passwd = null
      if (hidden === "etc/group") group = null
      await emit({
        ...entry,
        name: hidden,
        type: "3",
        mode: 0,
        uid: 0,
        gid: 0,
        size: 0,
        linkname: "",
        xattrs: new Map()
      })
      continue
    }
    const top = name.split("/")[0]!
    const isDevice = entry.type === "3" || entry.type === "4"
    const pseudo = (top === "proc" || top === "sys" || top === "dev") && name !== top && entry.type !== "5"
    if (isDevice || pseudo || DROPPED_FILES.has(name)) {
      await skip(dataSize)
      continue
    }
    if (entry.type === "5") dirs.set(name, entry)
    if ((name === "etc/passwd" || name === "etc/group") && entry.type === "0") {
      const body = await collect(dataSize, MAX_ACCOUNT_FILE)
      if (body !== undefined) {
        if (name === "etc/passwd") passwd = body.toString("utf8")
        else group = body.toString("utf8")
        await emit(
          entry,
          (async function*() {
            yield body
          })()
        )
        continue
      }
      throw new LayerRefused(`${name} is larger than ${MAX_ACCOUNT_FILE} bytes`)
    }
    await emit(entry, dataSize > 0 ? contentOf(dataSize) : undefined)
    if (dataSize === 0 && entry.type === "0") { /* nothing to pad */ }
  }
  await write(Buffer.alloc(BLOCK * 2))
  return {
    ...(passwd !== undefined ? { passwd } : {}),
    ...(group !== undefined ? { group } : {}),
    entries
  }
}
