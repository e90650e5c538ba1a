/**
 * Local folders as tar streams for `sandbox.files.upload` and `download` (Node only: `node:fs` is
 * imported when a folder is named, so the SDK still loads in a browser). A folder is written as a
 * ustar stream as it is read (a file at a time, never whole); a downloaded stream is extracted as
 * it arrives, refusing names that would land outside the target (absolute, `..`, through a link
 * it made) whatever the server sent.
 */

import type { FileHandle } from "node:fs/promises"

const BLOCK = 512

const octal = (value: number, length: number) => value.toString(8).padStart(length - 1, "0") + "\0"

/** A ustar header; a name past 100 bytes goes first as a GNU long-name record. */
const header = (name: string, type: string, size: number, mode: number, mtime: number, link = ""): Uint8Array => {
  const parts: Array<Uint8Array> = []
  const encoder = new TextEncoder()
  const bytes = encoder.encode(name)
  if (bytes.length > 100) {
    const body = encoder.encode(`${name}\0`)
    parts.push(header("././@LongLink", "L", body.length, 0, 0), pad(body))
  }
  const block = new Uint8Array(BLOCK)
  const put = (text: string, offset: number, length: number) =>
    block.set(encoder.encode(text).subarray(0, length), offset)
  put(name, 0, 100)
  put(octal(mode & 0o7777, 8), 100, 8)
  put(octal(0, 8), 108, 8)
  put(octal(0, 8), 116, 8)
  put(octal(size, 12), 124, 12)
  put(octal(Math.max(0, Math.floor(mtime)), 12), 136, 12)
  put("        ", 148, 8)
  put(type, 156, 1)
  put(link, 157, 100)
  put("ustar\0", 257, 6)
  put("00", 263, 2)
  let sum = 0
  for (const b of block) sum += b
  put(octal(sum, 7), 148, 8)
  parts.push(block)
  return concat(parts)
}

const concat = (parts: ReadonlyArray<Uint8Array>) => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0))
  let at = 0
  for (const p of parts) {
    out.set(p, at)
    at += p.length
  }
  return out
}

const pad = (data: Uint8Array) => {
  const rest = (BLOCK - (data.length % BLOCK)) % BLOCK
  return rest === 0 ? data : concat([data, new Uint8Array(rest)])
}

/** The local folder `root` as a tar stream (files, folders, symlinks), read as it is sent. */
export const tarFolder = async (root: string): Promise<ReadableStream<Uint8Array>> => {
  const fs = await import("node:fs/promises")
  const path = await import("node:path")
  async function* walk(dir: string, prefix: string): AsyncGenerator<Uint8Array> {
    const entries = await fs.readdir(dir, { withFileTypes: true })
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
    for (const entry of entries) {
      const full = path.join(dir, entry.name)
      const name = `${prefix}${entry.name}`
      const st = await fs.lstat(full)
      const mtime = st.mtimeMs / 1000
      if (st.isSymbolicLink()) {
        yield header(name, "2", 0, 0o777, mtime, await fs.readlink(full))
      } else if (st.isDirectory()) {
        yield header(`${name}/`, "5", 0, st.mode, mtime)
        yield* walk(full, `${name}/`)
      } else if (st.isFile()) {
        yield header(name, "0", st.size, st.mode, mtime)
        const handle = await fs.open(full, "r")
        try {
          const buffer = new Uint8Array(256 * 1024)
          let left = st.size
          while (left > 0) {
            const { bytesRead } = await handle.read(buffer, 0, Math.min(buffer.length, left))
            if (bytesRead === 0) break
            left -= bytesRead
            yield buffer.slice(0, bytesRead)
          }
          // A file that shrank while read is padded to its announced size.
          if (left > 0) yield new Uint8Array(left)
        } finally {
          await handle.close()
        }
        const rest = (BLOCK - (st.size % BLOCK)) % BLOCK
        if (rest > 0) yield new Uint8Array(rest)
      }
    }
  }
  const source = (async function*() {
    yield* walk(root, "")
    yield new Uint8Array(2 * BLOCK)
  })()
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      const next = await source.next()
      if (next.done) controller.close()
      else controller.enqueue(next.value)
    },
    async cancel() {
      await source.return(undefined)
    }
  })
}

/** `bytes` as base64, a slice at a time (no whole-array spread, no `Buffer`: browsers too). */
export const toBase64 = (bytes: Uint8Array): string => {
  let out = ""
  for (let at = 0; at < bytes.length; at += 0x6000) {
    out += btoa(String.fromCharCode(...bytes.subarray(at, at + 0x6000)))
  }
  return out
}

/** The local folder `root` as a gzipped tar (a Dockerfile's `context`), its bytes. */
export const tarGzFolder = async (root: string): Promise<Uint8Array> => {
  const st = await (await import("node:fs/promises")).stat(root).catch(() => undefined)
  if (st === undefined || !st.isDirectory()) throw new Error(`context: ${root} is not a folder`)
  const gzipped = (await tarFolder(root)).pipeThrough(
    new CompressionStream("gzip") as unknown as ReadableWritablePair<Uint8Array, Uint8Array>
  )
  const parts: Array<Uint8Array> = []
  for await (const chunk of gzipped as unknown as AsyncIterable<Uint8Array>) parts.push(chunk)
  return concat(parts)
}

const field = (block: Uint8Array, offset: number, length: number) => {
  const raw = block.subarray(offset, offset + length)
  const end = raw.indexOf(0)
  return new TextDecoder().decode(end === -1 ? raw : raw.subarray(0, end))
}

/** A member name made relative and normal, or undefined when it would leave the target. */
const safeName = (name: string, links: ReadonlySet<string>): string | undefined => {
  if (name.startsWith("/")) return undefined
  const parts = name.split("/").filter((p) => p !== "" && p !== ".")
  if (parts.some((p) => p === "..")) return undefined
  for (let i = 1; i < parts.length; i++) if (links.has(parts.slice(0, i).join("/"))) return undefined
  return parts.join("/")
}

/** Extracts the tar stream `chunks` into the local folder `root` (made), as it arrives. */
export const untarInto = async (chunks: AsyncIterable<Uint8Array>, root: string): Promise<number> => {
  const fs = await import("node:fs/promises")
  const path = await import("node:path")
  await fs.mkdir(root, { recursive: true })
  const links = new Set<string>()
  let pending = new Uint8Array(0)
  let file: { handle: FileHandle; left: number; pad: number } | undefined
  let longName: string | undefined
  let meta: { left: number; pad: number; data: Array<Uint8Array> } | undefined
  let skip = 0
  let entries = 0
  let ended = false
  for await (const chunk of chunks) {
    let data = pending.length > 0 ? concat([pending, chunk]) : chunk
    pending = new Uint8Array(0)
    while (data.length > 0 && !ended) {
      if (file !== undefined) {
        const n = Math.min(file.left, data.length)
        if (n > 0) await file.handle.write(data.subarray(0, n))
        file.left -= n
        data = data.subarray(n)
        if (file.left === 0) {
          await file.handle.close()
          skip = file.pad
          file = undefined
        }
        continue
      }
      if (meta !== undefined) {
        const n = Math.min(meta.left, data.length)
        meta.data.push(data.slice(0, n))
        meta.left -= n
        data = data.subarray(n)
        if (meta.left === 0) {
          longName = new TextDecoder().decode(concat(meta.data)).replace(/\0+$/, "")
          skip = meta.pad
          meta = undefined
        }
        continue
      }
      if (skip > 0) {
        const n = Math.min(skip, data.length)
        skip -= n
        data = data.subarray(n)
        continue
      }
      if (data.length < BLOCK) {
        pending = data.slice()
        break
      }
      const block = data.subarray(0, BLOCK)
      data = data.subarray(BLOCK)
      if (block.every((b) => b === 0)) {
        ended = true
        break
      }
      const size = parseInt(field(block, 124, 12).trim() || "0", 8)
      const type = field(block, 156, 1) || "0"
      const padBytes = (BLOCK - (size % BLOCK)) % BLOCK
      if (type === "L") {
        meta = { left: size, pad: padBytes, data: [] }
        if (size === 0) meta = undefined
        continue
      }
      const prefix = field(block, 257, 6) === "ustar" ? field(block, 345, 155) : ""
      const raw = longName ?? (prefix !== "" ? `${prefix}/${field(block, 0, 100)}` : field(block, 0, 100))
      longName = undefined
      const name = safeName(raw, links)
      if (name === undefined) throw new Error(`the archive names ${JSON.stringify(raw)}, outside the folder`)
      const target = path.join(root, name)
      const mode = parseInt(field(block, 100, 8).trim() || "644", 8) & 0o7777
      entries += 1
      if (type === "5") {
        await fs.mkdir(target, { recursive: true })
      } else if (type === "2") {
        await fs.rm(target, { force: true })
        await fs.symlink(field(block, 157, 100), target)
        links.add(name)
      } else if (type === "0" || type === "\0" || type === "7") {
        await fs.mkdir(path.dirname(target), { recursive: true })
        await fs.rm(target, { force: true })
        const handle = await fs.open(target, "w", mode)
        if (size === 0) await handle.close()
        else file = { handle, left: size, pad: padBytes }
        if (size === 0) skip = 0
      } else {
        // Hard links, fifos, devices: left out locally (their data, if any, skipped).
        skip = size + padBytes
      }
    }
  }
  if (file !== undefined) {
    await file.handle.close()
    throw new Error("the archive was cut short")
  }
  return entries
}
