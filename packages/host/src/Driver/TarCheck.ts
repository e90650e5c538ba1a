/**
 * The check of an uploaded tar stream (PUT .../files/archive), block by block as it passes, so
 * that what reaches the extracting `tar` inside the sandbox is only entries that land under the
 * target: an entry is refused (the whole upload with it) before its header is passed on when its
 * name is absolute or climbs out (`..`), when it would go through a symlink the archive made
 * (the staging folder is new, so the archive's own links are the only ones there), when it is a
 * device node or a kind of entry this check does not know, and when the stream is not a tar
 * (a header whose checksum is wrong) or ends inside an entry. Pure: bytes in, a verdict out; it
 * holds one header block, one pending long name (at most `MAX_META_BYTES`) and the names of the
 * archive's symlinks (at most `MAX_LINK_NAMES_BYTES` of them).
 */

const BLOCK = 512
/** A pax or GNU long-name record larger than this is refused (names are at most 4096 bytes). */
export const MAX_META_BYTES = 64 * 1024
/** The names of an archive's symlinks, kept to refuse entries under them: at most this many bytes. */
export const MAX_LINK_NAMES_BYTES = 16 * 1024 * 1024

/** Why an archive is refused, for people. */
export type TarRefusal = string

type Kind = "file" | "hardlink" | "symlink" | "dir" | "fifo"

const KINDS: Record<string, Kind> = {
  "0": "file",
  "\0": "file",
  "7": "file",
  "1": "hardlink",
  "2": "symlink",
  "5": "dir",
  "6": "fifo"
}

const cString = (block: Uint8Array, offset: number, length: number) => {
  const field = block.subarray(offset, offset + length)
  const end = field.indexOf(0)
  return Buffer.from(end === -1 ? field : field.subarray(0, end)).toString("utf8")
}

/** An octal field, or GNU's base-256 form (a first byte with its high bit set). */
const numberField = (block: Uint8Array, offset: number, length: number): number | undefined => {
  const field = block.subarray(offset, offset + length)
  if ((field[0]! & 0x80) !== 0) {
    let value = field[0]! & 0x7f
    for (let i = 1; i < field.length; i++) value = value * 256 + field[i]!
    return Number.isSafeInteger(value) ? value : undefined
  }
  const text = Buffer.from(field).toString("latin1").replace(/\0.*$/s, "").trim()
  if (text === "") return 0
  return /^[0-7]+$/.test(text) ? parseInt(text, 8) : undefined
}

const checksumOk = (block: Uint8Array) => {
  const stored = numberField(block, 148, 8)
  if (stored === undefined) return false
  let unsigned = 0
  let signed = 0
  for (let i = 0; i < BLOCK; i++) {
    const byte = i >= 148 && i < 156 ? 32 : block[i]!
    unsigned += byte
    signed += byte > 127 ? byte - 256 : byte
  }
  return stored === unsigned || stored === signed
}

const isZero = (block: Uint8Array) => block.every((b) => b === 0)

/**
 * A member name made relative and normal (`./a//b/` → `a/b`), or a refusal: absolute, `..`
 * anywhere, NUL, or longer than 4096 bytes. The empty name is the target itself (`./`).
 */
export const normalName = (name: string): { readonly name: string } | { readonly refusal: TarRefusal } => {
  if (name.startsWith("/")) return { refusal: `${JSON.stringify(name)}: an absolute name` }
  if (name.includes("\0")) return { refusal: "a name with a NUL byte" }
  if (Buffer.byteLength(name) > 4096) return { refusal: "a name longer than 4096 bytes" }
  const parts: Array<string> = []
  for (const part of name.split("/")) {
    if (part === "" || part === ".") continue
    if (part === "..") return { refusal: `${JSON.stringify(name)}: climbs out with ..` }
    parts.push(part)
  }
  return { name: parts.join("/") }
}

/** `path` and `linkpath` of a pax extended header's records ("<len> key=value\n"). */
const paxRecords = (data: Uint8Array): Map<string, string> | undefined => {
  const records = new Map<string, string>()
  let at = 0
  while (at < data.length) {
    if (data[at] === 0) break
    const space = data.indexOf(0x20, at)
    if (space === -1) return undefined
    const length = Number(Buffer.from(data.subarray(at, space)).toString("latin1"))
    if (!Number.isSafeInteger(length) || length <= space - at || at + length > data.length) return undefined
    const record = Buffer.from(data.subarray(space + 1, at + length - 1)).toString("utf8")
    const eq = record.indexOf("=")
    if (eq === -1) return undefined
    records.set(record.slice(0, eq), record.slice(eq + 1))
    at += length
  }
  return records
}

export class TarCheck {
  private pending = Buffer.alloc(0)
  /** Bytes of the current entry's data still to pass (padded to whole blocks). */
  private skip = 0
  /** A pax or GNU long-name record being gathered: its kind and how many bytes remain. */
  private meta: { kind: "x" | "g" | "L" | "K"; size: number; data: Array<Buffer>; left: number } | undefined
  private longName: string | undefined
  private longLink: string | undefined
  private paxPath: string | undefined
  private paxLink: string | undefined
  private readonly links = new Set<string>()
  private linkBytes = 0
  private entries = 0
  private ended = false
  private zeros = 0

  /** How many entries passed so far (the pax and long-name records not counted). */
  get count(): number {
    return this.entries
  }

  /** Checks `chunk`; `undefined` when everything so far is acceptable, else why not. */
  push(chunk: Uint8Array): TarRefusal | undefined {
    let data = this.pending.length > 0 ? Buffer.concat([this.pending, chunk]) : Buffer.from(chunk)
    this.pending = Buffer.alloc(0)
    while (data.length > 0) {
      if (this.ended) return undefined
      if (this.skip > 0) {
        const n = Math.min(this.skip, data.length)
        if (this.meta !== undefined) {
          const take = Math.min(n, this.meta.left)
          this.meta.data.push(Buffer.from(data.subarray(0, take)))
          this.meta.left -= take
        }
        this.skip -= n
        data = data.subarray(n)
        if (this.skip === 0 && this.meta !== undefined) {
          const refusal = this.endMeta()
          if (refusal !== undefined) return refusal
        }
        continue
      }
      if (data.length < BLOCK) {
        this.pending = Buffer.from(data)
        return undefined
      }
      const refusal = this.header(data.subarray(0, BLOCK))
      if (refusal !== undefined) return refusal
      data = data.subarray(BLOCK)
    }
    return undefined
  }

  /** The stream ended: refused unless it ended between entries and held at least one block. */
  end(): TarRefusal | undefined {
    if (this.ended) return undefined
    if (this.pending.length > 0 || this.skip > 0 || this.meta !== undefined) return "the archive is cut short"
    if (this.entries === 0 && this.zeros === 0) return "not a tar archive (no entry)"
    return undefined
  }

  private endMeta(): TarRefusal | undefined {
    const meta = this.meta!
    this.meta = undefined
    const body = Buffer.concat(meta.data)
    if (meta.kind === "L" || meta.kind === "K") {
      const text = body.toString("utf8").replace(/\0+$/, "")
      if (meta.kind === "L") this.longName = text
      else this.longLink = text
      return undefined
    }
    const records = paxRecords(body)
    if (records === undefined) return "an unreadable pax header"
    // A global header's path would name every entry after it: refused rather than guessed.
    if (meta.kind === "g") {
      return records.has("path") || records.has("linkpath") ? "a pax global header naming paths" : undefined
    }
    const path = records.get("path")
    const link = records.get("linkpath")
    if (path !== undefined) this.paxPath = path
    if (link !== undefined) this.paxLink = link
    return undefined
  }

  private throughLink(name: string): boolean {
    for (let at = name.indexOf("/"); at !== -1; at = name.indexOf("/", at + 1)) {
      if (this.links.has(name.slice(0, at))) return true
    }
    return false
  }

  private header(block: Uint8Array): TarRefusal | undefined {
    if (isZero(block)) {
      // Two zero blocks end the archive; what follows is padding.
      this.zeros += 1
      if (this.zeros >= 2) this.ended = true
      return undefined
    }
    if (this.zeros > 0) return "an entry after the end of the archive"
    if (!checksumOk(block)) return this.entries === 0 ? "not a tar archive" : "a header with a wrong checksum"
    const type = String.fromCharCode(block[156]!)
    const size = numberField(block, 124, 12)
    if (size === undefined || size < 0) return "a header with an unreadable size"
    const padded = Math.ceil(size / BLOCK) * BLOCK
    if (type === "x" || type === "g" || type === "L" || type === "K") {
      if (size > MAX_META_BYTES) return "a pax or long-name header over 64 KiB"
      this.meta = { kind: type, size, data: [], left: size }
      this.skip = padded
      if (padded === 0) return this.endMeta()
      return undefined
    }
    const kind = KINDS[type]
    if (kind === undefined) {
      return type === "3" || type === "4"
        ? "a device node"
        : `an entry of type ${JSON.stringify(type)}, which is not taken (files, folders, links and fifos are)`
    }
    const magic = Buffer.from(block.subarray(257, 263)).toString("latin1")
    const prefix = magic === "ustar\0" ? cString(block, 345, 155) : ""
    const rawName = this.paxPath ?? this.longName ??
      (prefix !== "" ? `${prefix}/${cString(block, 0, 100)}` : cString(block, 0, 100))
    const rawLink = this.paxLink ?? this.longLink ?? cString(block, 157, 100)
    this.paxPath =
      this.paxLink =
      this.longName =
      this.longLink =
        undefined
    const named = normalName(rawName)
    if ("refusal" in named) return named.refusal
    const name = named.name
    if (name === "" && kind !== "dir") return "an entry that is not a folder at the target itself"
    if (this.throughLink(name)) return `${JSON.stringify(rawName)}: through a symlink of the archive`
    if (kind === "hardlink") {
      const target = normalName(rawLink)
      if ("refusal" in target) return `hard link ${JSON.stringify(rawName)}: ${target.refusal}`
      if (target.name === "" || this.links.has(target.name) || this.throughLink(target.name)) {
        return `hard link ${JSON.stringify(rawName)}: its target is outside the archive's files`
      }
    }
    if (kind === "symlink") {
      this.linkBytes += Buffer.byteLength(name) + 64
      if (this.linkBytes > MAX_LINK_NAMES_BYTES) return "too many symlinks"
      this.links.add(name)
    }
    this.entries += 1
    this.skip = kind === "file" ? padded : 0
    return undefined
  }
}
