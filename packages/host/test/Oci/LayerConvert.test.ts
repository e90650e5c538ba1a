/**
 * OCI layers rewritten as platform layers (`LayerConvert.ts`), from tars GNU tar makes of real
 * folders: whiteouts become overlay whiteouts, the opaque marker the folder's xattr, owners out of
 * a sandbox's range `nobody`, device nodes and the files the platform writes dropped, `..` refused.
 */
import { convertLayer, LayerRefused } from "@svc/host/Oci/LayerConvert"
import { execFileSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { afterEach, describe, expect, it } from "vitest"

const dirs: Array<string> = []
const temp = () => {
  const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "svc-convert-"))
  dirs.push(dir)
  return dir
}
afterEach(() => {
  for (const dir of dirs.splice(0)) Fs.rmSync(dir, { recursive: true, force: true })
})

const convert = async (tar: Buffer) => {
  const parts: Array<Buffer> = []
  const result = await convertLayer(
    (async function*() {
      for (let at = 0; at < tar.length; at += 1000) yield tar.subarray(at, at + 1000)
    })(),
    (chunk) => void parts.push(Buffer.from(chunk))
  )
  return { result, out: Buffer.concat(parts) }
}

/** `tar -tv` of bytes, one line per entry: type, owner, name. */
const listing = (bytes: Buffer) =>
  execFileSync("tar", ["-tv", "--numeric-owner", "-f", "-"], { input: bytes, encoding: "utf8" })
    .trim().split("\n")
    .map((line) => {
      const f = line.split(/\s+/)
      return `${f[0]![0]} ${f[1]} ${f.slice(5).join(" ")}`
    })

describe("OCI layer conversion", () => {
  it("whiteouts, an opaque folder, owners, devices and platform files", async () => {
    const root = temp()
    Fs.mkdirSync(Path.join(root, "data"))
    Fs.writeFileSync(Path.join(root, "data", ".wh.gone"), "")
    Fs.mkdirSync(Path.join(root, "opt", "old"), { recursive: true })
    Fs.writeFileSync(Path.join(root, "opt", "old", ".wh..wh..opq"), "")
    Fs.writeFileSync(Path.join(root, "opt", "old", "y"), "new\n")
    Fs.writeFileSync(Path.join(root, "far"), "far\n")
    Fs.lchownSync(Path.join(root, "far"), 70000, 70000)
    Fs.mkdirSync(Path.join(root, "etc"))
    Fs.writeFileSync(Path.join(root, "etc", "passwd"), "root:x:0:0::/root:/bin/sh\n")
    Fs.writeFileSync(Path.join(root, "etc", "resolv.conf"), "nameserver 10.0.0.1\n")
    Fs.writeFileSync(Path.join(root, "suid"), "#!/bin/sh\n", { mode: 0o4755 })
    Fs.chmodSync(Path.join(root, "suid"), 0o4755)
    Fs.mkdirSync(Path.join(root, "dev"))
    execFileSync("mknod", [Path.join(root, "dev", "sda"), "b", "8", "0"])
    const tar = execFileSync("tar", ["-c", "--numeric-owner", "--sort=name", "-C", root, "."], {
      maxBuffer: 64 * 1024 * 1024
    })
    const { out, result } = await convert(tar)
    expect(result.passwd).toBe("root:x:0:0::/root:/bin/sh\n")
    const entries = listing(out)
    expect(entries).toContain("c 0/0 data/gone")
    expect(entries).toContain("- 65534/65534 far")
    expect(entries).toContain("- 0/0 opt/old/y")
    expect(entries.some((e) => e.endsWith(".wh.gone") || e.includes(".wh..wh..opq"))).toBe(false)
    expect(entries.some((e) => e.includes("resolv.conf") || e.includes("dev/sda"))).toBe(false)
    expect(entries).toContain("d 0/0 dev/")
    // The opaque folder, written again with its mark.
    expect(out.toString("latin1")).toContain("SCHILY.xattr.trusted.overlay.opaque=y")
    // Set-id bits kept (every exec runs with no_new_privs).
    expect(execFileSync("tar", ["-tv", "-f", "-"], { input: out, encoding: "utf8" })).toMatch(/-rwsr-xr-x .* suid/)

    // The same layer converts to the same bytes (its digest names it on every host).
    expect((await convert(tar)).out.equals(out)).toBe(true)

    // GNU tar extracts it: the whiteout a 0:0 character device, the mark on the folder.
    const into = temp()
    execFileSync("tar", [
      "-x",
      "--numeric-owner",
      "--xattrs",
      "--xattrs-include=trusted.overlay.opaque",
      "-C",
      into,
      "-f",
      "-"
    ], {
      input: out
    })
    const st = Fs.lstatSync(Path.join(into, "data", "gone"))
    expect(st.isCharacterDevice() && st.rdev === 0).toBe(true)
    expect(Fs.readFileSync(Path.join(into, "opt", "old", "y"), "utf8")).toBe("new\n")
  })

  it("refuses a name with ..", async () => {
    const root = temp()
    Fs.writeFileSync(Path.join(root, "x"), "x\n")
    const tar = execFileSync("tar", ["-c", "-P", "--transform", "s,^x,../x,", "-C", root, "x"])
    await expect(convert(tar)).rejects.toBeInstanceOf(LayerRefused)
  })

  it("refuses a truncated tar", async () => {
    const root = temp()
    Fs.writeFileSync(Path.join(root, "big"), Buffer.alloc(10_000, 1))
    const tar = execFileSync("tar", ["-c", "-C", root, "big"])
    await expect(convert(tar.subarray(0, 3000))).rejects.toThrow(/ends in the middle/)
  })
})
