/**
 * The check of an uploaded tar stream (`Driver/TarCheck.ts`) against a table of archives: what it
 * lets through and why it refuses the rest, fed whole and fed a byte at a time (a header split
 * across chunks is checked the same).
 */
import { describe, expect, it } from "@effect/vitest"
import { TarCheck } from "../src/Driver/TarCheck.ts"

// A ustar writer of its own (@svc/testing depends on this package): name, type, data, link.
interface Entry {
  readonly name: string
  readonly type?: string
  readonly data?: string | Uint8Array
  readonly link?: string
}
const octal = (value: number, length: number) => value.toString(8).padStart(length - 1, "0") + "\0"
const tarHeader = (entry: Entry, size: number) => {
  const block = Buffer.alloc(512)
  block.write(entry.name, 0, 100, "utf8")
  block.write(octal(0o644, 8), 100, "latin1")
  block.write(octal(size, 12), 124, "latin1")
  block.write("        ", 148, "latin1")
  block.write(entry.type ?? "0", 156, "latin1")
  block.write(entry.link ?? "", 157, 100, "utf8")
  block.write("ustar\0", 257, "latin1")
  let sum = 0
  for (const byte of block) sum += byte
  block.write(octal(sum, 7), 148, "latin1")
  return block
}
const tar = (entries: ReadonlyArray<Entry>) =>
  Buffer.concat([
    ...entries.flatMap((e) => {
      const data = Buffer.from(e.data ?? "")
      return [tarHeader(e, data.length), data, Buffer.alloc((512 - (data.length % 512)) % 512)]
    }),
    Buffer.alloc(1024)
  ])

const verdict = (bytes: Uint8Array, chunk = bytes.length || 1) => {
  const check = new TarCheck()
  for (let at = 0; at < bytes.length; at += chunk) {
    const refusal = check.push(bytes.subarray(at, at + chunk))
    if (refusal !== undefined) return refusal
  }
  return check.end() ?? "ok"
}

const pax = (records: Record<string, string>, entry: Entry) => {
  const body = Object.entries(records).map(([k, v]) => {
    const line = ` ${k}=${v}\n`
    let n = line.length + 2
    while (String(n).length + line.length !== n) n = String(n).length + line.length
    return `${n}${line}`
  }).join("")
  const data = Buffer.from(body)
  return Buffer.concat([
    tarHeader({ name: "PaxHeader", type: "x" }, data.length),
    data,
    Buffer.alloc((512 - (data.length % 512)) % 512),
    tar([entry]).subarray(0, -1024),
    Buffer.alloc(1024)
  ])
}

const table: ReadonlyArray<readonly [string, Uint8Array, RegExp | "ok"]> = [
  [
    "files, folders, links, fifos",
    tar([
      { name: "./", type: "5" },
      { name: "a/", type: "5" },
      { name: "a/f", data: "x" },
      { name: "l", type: "2", link: "/etc" },
      { name: "h", type: "1", link: "a/f" },
      { name: "p", type: "6" }
    ]),
    "ok"
  ],
  ["an empty archive (end blocks only)", Buffer.alloc(1024), "ok"],
  ["..", tar([{ name: "../x", data: "x" }]), /climbs out/],
  ["inner ..", tar([{ name: "a/../../x" }]), /climbs out/],
  ["an absolute name", tar([{ name: "/etc/x" }]), /absolute/],
  ["through an archive link", tar([{ name: "l", type: "2", link: "/" }, { name: "l/x" }]), /through a symlink/],
  ["a hard link out", tar([{ name: "h", type: "1", link: "../x" }]), /climbs out/],
  [
    "a hard link through a link",
    tar([{ name: "l", type: "2", link: "/" }, { name: "h", type: "1", link: "l/x" }]),
    /outside/
  ],
  ["a char device", tar([{ name: "c", type: "3" }]), /device/],
  ["a block device", tar([{ name: "b", type: "4" }]), /device/],
  ["a file at the target itself", tar([{ name: "./", data: "x" }]), /not a folder/],
  ["not a tar", Buffer.from("hello world".repeat(100)), /not a tar/],
  ["nothing", Buffer.alloc(0), /no entry/],
  ["cut inside an entry", tar([{ name: "f", data: new Uint8Array(2000) }]).subarray(0, 1000), /cut short/],
  ["a pax path climbing out", pax({ path: "../evil" }, { name: "fine" }), /climbs out/],
  ["a pax path that is fine", pax({ path: "dir/long-name" }, { name: "x" }), "ok"]
]

describe("TarCheck", () => {
  for (const [what, bytes, expected] of table) {
    it(what, () => {
      for (const chunk of [bytes.length || 1, 1, 511, 513]) {
        const result = verdict(bytes, chunk)
        if (expected === "ok") expect(result, `chunks of ${chunk}`).toBe("ok")
        else expect(result, `chunks of ${chunk}`).toMatch(expected)
      }
    })
  }
})
