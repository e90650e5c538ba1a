/**
 * The driver's native steps (`native/*.c`: `svc-start`, `svc-enter`, `svc-disk-mount`,
 * `svc-spawner`), built
 * with the host's C compiler into the data dir's root-only `host/` folder when missing or out of
 * date. A binary is named by the hash of its source and of the headers beside it, written under
 * a temporary name and renamed: concurrent agents see whole files, and an edited source gets a
 * new binary.
 */
import { execFile } from "node:child_process"
import { createHash } from "node:crypto"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"

export type NativeStep =
  | "svc-start"
  | "svc-enter"
  | "svc-disk-mount"
  | "svc-spawner"
  | "svc-init"
  | "svc-watch"
  | "svc-ctx"

const NATIVE_DIR = fileURLToPath(new URL("../../native/", import.meta.url))

const findCompiler = (): string | undefined =>
  ["/usr/bin/cc", "/usr/bin/gcc", "/usr/local/bin/cc"].find((path) => FsSync.existsSync(path))

/**
 * Builds `native/<name>.c` under `dir` (made root-only) unless its binary is there; its path.
 * `sourceDir` lets another host package build its own helper the same way (@svc/egress's front);
 * `flags` are added to the compiler's (`-static` for what runs inside a sandbox).
 */
export const build = async (
  dir: string,
  name: NativeStep | string,
  sourceDir: string = NATIVE_DIR,
  flags: ReadonlyArray<string> = []
): Promise<string> => {
  const source = NodePath.join(sourceDir, `${name}.c`)
  const headers = (await Fs.readdir(sourceDir)).filter((file) => file.endsWith(".h")).sort()
  const hash = createHash("sha256").update(flags.join(" ")).update(await Fs.readFile(source))
  for (const header of headers) hash.update(header).update(await Fs.readFile(NodePath.join(sourceDir, header)))
  const binary = NodePath.join(dir, `${name}-${hash.digest("hex").slice(0, 12)}`)
  if (FsSync.existsSync(binary)) return binary
  const cc = findCompiler()
  if (cc === undefined) throw new Error(`a C compiler (cc) is needed to build ${name}: install gcc and libc6-dev`)
  await Fs.mkdir(dir, { recursive: true, mode: 0o700 })
  const temp = `${binary}.tmp-${process.pid}`
  await promisify(execFile)(cc, ["-O2", "-Wall", "-pthread", ...flags, "-o", temp, source], {
    env: { PATH: "/usr/bin:/bin" }
  })
  await Fs.chmod(temp, 0o700)
  await Fs.rename(temp, binary)
  return binary
}
