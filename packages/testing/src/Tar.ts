/**
 * Tar archives written by hand for tests of the archive routes: well-formed ones, and the hostile
 * ones no well-behaved `tar` writes (`..` names, absolute names, links out, device nodes, a
 * symlink then an entry through it). Headers are ustar with a correct checksum.
 */

export interface TarEntry {
  readonly name: string
  /** `0` file (default), `1` hard link, `2` symlink, `3` char device, `4` block device, `5` folder, `6` fifo. */
  readonly type?: "0" | "1" | "2" | "3" | "4" | "5" | "6"
  readonly data?: string | Uint8Array
  /** A link's target. */
  readonly link?: string
  readonly mode?: number
}

const octal = (value: number, length: number) => value.toString(8).padStart(length - 1, "0") + "\0"

/** One ustar header block for `entry` with `size` bytes of data. */
export const tarHeader = (entry: TarEntry, size: number): Buffer => {
  const block = Buffer.alloc(512)
  block.write(entry.name, 0, 100, "utf8")
  block.write(octal(entry.mode ?? (entry.type === "5" ? 0o755 : 0o644), 8), 100, "latin1")
  block.write(octal(0, 8), 108, "latin1")
  block.write(octal(0, 8), 116, "latin1")
  block.write(octal(size, 12), 124, "latin1")
  block.write(octal(Math.floor(Date.now() / 1000), 12), 136, "latin1")
  block.write("        ", 148, "latin1")
  block.write(entry.type ?? "0", 156, "latin1")
  block.write(entry.link ?? "", 157, 100, "utf8")
  block.write("ustar\0", 257, "latin1")
  block.write("00", 263, "latin1")
  if (entry.type === "3" || entry.type === "4") {
    block.write(octal(1, 8), 329, "latin1")
    block.write(octal(3, 8), 337, "latin1")
  }
  let sum = 0
  for (const byte of block) sum += byte
  block.write(octal(sum, 7), 148, "latin1")
  return block
}

/** A whole archive of `entries`, with its two zero blocks at the end. */
export const tar = (entries: ReadonlyArray<TarEntry>): Buffer => {
  const parts: Array<Buffer> = []
  for (const entry of entries) {
    const data = entry.data === undefined
      ? Buffer.alloc(0)
      : typeof entry.data === "string"
      ? Buffer.from(entry.data, "utf8")
      : Buffer.from(entry.data)
    parts.push(tarHeader(entry, data.length), data, Buffer.alloc((512 - (data.length % 512)) % 512))
  }
  parts.push(Buffer.alloc(1024))
  return Buffer.concat(parts)
}

/** The entries of an uncompressed tar: name, type, link and data (for assertions on downloads). */
export const untar = (archive: Uint8Array): Array<{ name: string; type: string; link: string; data: Buffer }> => {
  const bytes = Buffer.from(archive)
  const out: Array<{ name: string; type: string; link: string; data: Buffer }> = []
  let at = 0
  let longName: string | undefined
  while (at + 512 <= bytes.length) {
    const block = bytes.subarray(at, at + 512)
    if (block.every((b) => b === 0)) break
    const field = (offset: number, length: number) => {
      const raw = block.subarray(offset, offset + length)
      const end = raw.indexOf(0)
      return raw.subarray(0, end === -1 ? length : end).toString("utf8")
    }
    const size = parseInt(field(124, 12).trim() || "0", 8)
    const type = field(156, 1) || "0"
    const prefix = block.subarray(257, 263).toString("latin1") === "ustar\0" ? field(345, 155) : ""
    const data = bytes.subarray(at + 512, at + 512 + size)
    at += 512 + Math.ceil(size / 512) * 512
    if (type === "L") {
      longName = data.toString("utf8").replace(/\0+$/, "")
      continue
    }
    const name = longName ?? (prefix !== "" ? `${prefix}/${field(0, 100)}` : field(0, 100))
    longName = undefined
    out.push({ name, type, link: field(157, 100), data: Buffer.from(data) })
  }
  return out
}
