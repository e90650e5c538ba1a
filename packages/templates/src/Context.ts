/**
 * A Dockerfile's build context as the API takes it (`context`: base64 of a tar.gz of at most
 * 50 MiB): decoded, checked (a gzip'd tar whose every entry stays inside it: no absolute name,
 * no `..`; unpacked at most `MAX_UNPACKED` bytes), then put into the image store named by its
 * sha256, where the build's host takes it (`BuildCommand.contextObject`). Unreferenced, it is
 * collected like any layer (`Collect.ts`).
 */
import { MAX_CONTEXT_BYTES } from "@svc/domain/Template"
import { createHash } from "node:crypto"
import * as Zlib from "node:zlib"

/** What a context may unpack to: past it, it is refused (a decompression bomb). */
export const MAX_UNPACKED = 1024 * 1024 * 1024

/** Why a context is refused, or its bytes and their sha256 (hex). */
export const checkContext = (
  base64: string
): { readonly _tag: "Refused"; readonly message: string } | {
  readonly _tag: "Checked"
  readonly bytes: Buffer
  readonly hex: string
} => {
  const bytes = Buffer.from(base64.replace(/\s+/g, ""), "base64")
  if (bytes.length === 0) return { _tag: "Refused", message: "the context is empty" }
  if (bytes.length > MAX_CONTEXT_BYTES) return { _tag: "Refused", message: "the context is larger than 50 MiB" }
  let tar: Buffer
  try {
    tar = Zlib.gunzipSync(bytes, { maxOutputLength: MAX_UNPACKED })
  } catch (e) {
    return {
      _tag: "Refused",
      message: (e as NodeJS.ErrnoException).code === "ERR_BUFFER_TOO_LARGE"
        ? "the context unpacks to more than 1 GiB"
        : "the context is not a gzip'd tar"
    }
  }
  let at = 0
  let longName: string | undefined
  let paxPath: string | undefined
  while (at + 512 <= tar.length) {
    const header = tar.subarray(at, at + 512)
    if (header.every((b) => b === 0)) break
    const field = (start: number, length: number) => {
      const slice = header.subarray(start, start + length)
      const nul = slice.indexOf(0)
      return (nul >= 0 ? slice.subarray(0, nul) : slice).toString("utf8")
    }
    const size = parseInt(field(124, 12).trim() || "0", 8)
    if (!Number.isFinite(size) || size < 0) return { _tag: "Refused", message: "the context is not a valid tar" }
    const type = field(156, 1)
    const body = tar.subarray(at + 512, at + 512 + size)
    at += 512 + Math.ceil(size / 512) * 512
    if (type === "L") {
      longName = body.toString("utf8").replace(/\0.*$/s, "")
      continue
    }
    if (type === "x") {
      paxPath = /(?:^|\n)\d+ path=([^\n]*)\n/.exec(body.toString("utf8"))?.[1]
      continue
    }
    if (type === "g" || type === "K") continue
    const prefix = field(345, 155)
    const name = paxPath ?? longName ?? (prefix !== "" ? `${prefix}/${field(0, 100)}` : field(0, 100))
    longName = undefined
    paxPath = undefined
    if (name.startsWith("/") || name.split("/").includes("..")) {
      return { _tag: "Refused", message: `the context's entry ${JSON.stringify(name.slice(0, 200))} leaves it` }
    }
    if (
      (type === "1") && (() => {
        const link = field(157, 100)
        return link.startsWith("/") || link.split("/").includes("..")
      })()
    ) {
      return { _tag: "Refused", message: `the context's hard link ${JSON.stringify(name.slice(0, 200))} leaves it` }
    }
  }
  return { _tag: "Checked", bytes, hex: createHash("sha256").update(bytes).digest("hex") }
}
