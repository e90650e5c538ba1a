/**
 * A Dockerfile build's context on the host: its tar.gz (an object of the image store, named by
 * its sha256) extracted once per build into a private folder, and each `COPY`/`ADD` packed from
 * it as a tar of just what it copies (no entry for a folder above the destination, so the image's
 * own folders keep their owners and modes), owners as the step says (root by default), to be
 * unpacked inside the build sandbox. A source that leaves the context (`..`, or a link out of
 * it) is refused.
 */
import { execFile } from "node:child_process"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"

const HOST_ENV = { PATH: "/usr/sbin:/usr/bin:/sbin:/bin" }

const tar = (args: ReadonlyArray<string>) =>
  new Promise<void>((resolve, reject) => {
    execFile("tar", args, { env: HOST_ENV, maxBuffer: 4 * 1024 * 1024 }, (error, _out, stderr) => {
      if (error) reject(new Error(`tar: ${String(stderr).trim().slice(-300) || error.message}`))
      else resolve()
    })
  })

export class CopyRefused extends Error {}

/** Extracts the context archive `file` into `dir` (made here): owners dropped, set-id bits too. */
export const extractContext = async (file: string, dir: string): Promise<void> => {
  await Fs.mkdir(dir, { recursive: true, mode: 0o700 })
  await tar(["--extract", "--gzip", "--file", file, "--no-same-owner", "--no-same-permissions", "--directory", dir])
}

/** Every path under `top` (itself first), relative to `root`, links not followed. */
const walk = async (root: string, top: string): Promise<Array<string>> => {
  const out = [NodePath.relative(root, top)]
  const st = await Fs.lstat(top)
  if (st.isDirectory()) {
    for (const name of (await Fs.readdir(top)).sort()) out.push(...await walk(root, NodePath.join(top, name)))
  }
  return out
}

/**
 * Stages `sources` (paths of the context) at `dest` the way Docker's COPY places them, and packs
 * them into `file`: the tar to unpack at `/`, and the folders to make first.
 */
export const packCopy = async (
  context: string,
  step: { readonly sources: ReadonlyArray<string>; readonly dest: string; readonly chown?: string },
  stage: string,
  file: string
): Promise<{ readonly parents: ReadonlyArray<string> }> => {
  const root = await Fs.realpath(context)
  const [uid = "0", gid = uid] = (step.chown ?? "0:0").split(":")
  const intoFolder = step.sources.length > 1 || step.dest.endsWith("/")
  const dest = step.dest.replace(/\/+$/, "") || "/"
  const tops: Array<string> = []
  await Fs.mkdir(stage, { recursive: true, mode: 0o700 })
  for (const source of step.sources) {
    const path = NodePath.resolve(root, source)
    const real = await Fs.realpath(path).catch(() => {
      throw new CopyRefused(`COPY source ${JSON.stringify(source)} is not in the context`)
    })
    if (real !== root && !real.startsWith(root + NodePath.sep)) {
      throw new CopyRefused(`COPY source ${JSON.stringify(source)} is outside the context`)
    }
    const st = await Fs.stat(real)
    if (st.isDirectory()) {
      // A folder's content goes into dest.
      const target = NodePath.join(stage, dest)
      await Fs.mkdir(target, { recursive: true })
      for (const name of await Fs.readdir(real)) {
        await Fs.cp(NodePath.join(real, name), NodePath.join(target, name), { recursive: true, verbatimSymlinks: true })
        tops.push(NodePath.join(dest, name))
      }
    } else {
      const target = intoFolder ? NodePath.join(dest, NodePath.basename(real)) : dest
      await Fs.mkdir(NodePath.join(stage, NodePath.dirname(target)), { recursive: true })
      await Fs.cp(real, NodePath.join(stage, target))
      tops.push(target)
    }
  }
  const entries: Array<string> = []
  for (const top of new Set(tops)) entries.push(...await walk(stage, NodePath.join(stage, top)))
  const list = `${file}.list`
  await Fs.writeFile(list, entries.join("\n") + "\n", { mode: 0o600 })
  try {
    await tar([
      "--create",
      "--file",
      file,
      "--numeric-owner",
      `--owner=${uid}`,
      `--group=${gid}`,
      "--no-recursion",
      "--directory",
      stage,
      "--files-from",
      list
    ])
  } finally {
    await Fs.rm(list, { force: true })
  }
  const parents = [...new Set(tops.map((top) => NodePath.dirname(top)))]
  return { parents }
}
