/**
 * The built-in `base` template: a root file system assembled from the host's static busybox,
 * plus the host's `curl` with its shared libraries and CA bundle (busybox `wget` from Debian's
 * busybox-static crashes there; a real HTTP/HTTPS client is what users and tests reach for),
 * and the egress proxy's CA in that bundle when the driver is given one.
 * Built into a temporary folder and renamed into place, so a reader sees either nothing or a
 * complete tree, and two agents building at once cannot corrupt it.
 */
import { execFileSync } from "node:child_process"
import { createHash } from "node:crypto"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"

export const BASE_TEMPLATE = "base"

/** Bumped when the layout below changes: an older tree is then rebuilt beside it. */
const BASE_VERSION = "3"

const files: ReadonlyArray<readonly [string, string, number]> = [
  ["etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n", 0o644],
  ["etc/group", "root:x:0:\nnogroup:x:65534:\n", 0o644],
  ["etc/shadow", "root:*:19000:0:99999:7:::\nnobody:*:19000:0:99999:7:::\n", 0o640],
  ["etc/hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n", 0o644],
  ["etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n", 0o644],
  [
    "etc/profile",
    "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\nexport PS1='\\h:\\w\\$ '\n",
    0o644
  ],
  ["etc/os-release", "NAME=\"svc base\"\nID=svc-base\nVERSION_ID=" + BASE_VERSION + "\n", 0o644],
  ["etc/svc-template", "base\n", 0o644]
]

const dirs: ReadonlyArray<readonly [string, number]> = [
  ["bin", 0o755],
  ["sbin", 0o755],
  ["usr", 0o755],
  ["usr/bin", 0o755],
  ["usr/sbin", 0o755],
  ["usr/local", 0o755],
  ["usr/local/bin", 0o755],
  ["etc", 0o755],
  ["root", 0o700],
  ["home", 0o755],
  ["tmp", 0o1777],
  ["var", 0o755],
  ["var/tmp", 0o1777],
  ["var/log", 0o755],
  ["run", 0o755],
  ["proc", 0o555],
  ["sys", 0o555],
  ["dev", 0o755],
  ["mnt", 0o755],
  ["opt", 0o755],
  ["srv", 0o755],
  ["etc/ssl", 0o755],
  ["etc/ssl/certs", 0o755]
]

/** What the template holds beyond busybox; part of its version, so a change rebuilds it. */
export interface BaseTemplateOptions {
  /** Appended to the CA bundle (the egress proxy's CA). */
  readonly trustedCaPem?: string
  /** `/etc/resolv.conf`'s nameserver (the gateway, where the sandboxes' resolver answers). */
  readonly nameserver?: string
  /** The HTTP client copied in with its libraries; default the host's `/usr/bin/curl` when present. */
  readonly curl?: string
}

const HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"

/** The shared libraries a dynamic binary loads, loader included (`ldd`). */
const sharedLibraries = (binary: string): ReadonlyArray<string> =>
  execFileSync("ldd", [binary], { encoding: "utf8", env: { PATH: "/usr/bin:/bin" } })
    .split("\n")
    .map((line) => /(?:=>\s*)?(\/\S+)\s+\(0x/.exec(line)?.[1])
    .filter((path): path is string => path !== undefined)

const fileStamp = (path: string) => {
  const st = FsSync.statSync(path, { throwIfNoEntry: false })
  return st === undefined ? "absent" : `${st.size}:${Math.floor(st.mtimeMs)}`
}

/** The version a tree built with these options carries. */
const versionOf = (options: BaseTemplateOptions, curl: string | undefined): string =>
  BASE_VERSION + ":" + createHash("sha256")
    .update(JSON.stringify([
      options.trustedCaPem ?? "",
      options.nameserver ?? "",
      curl ?? "",
      curl === undefined ? "" : fileStamp(curl),
      fileStamp(HOST_CA_BUNDLE)
    ]))
    .digest("hex").slice(0, 16)

/** The applets the host's busybox offers (`busybox --list`). */
const applets = (busybox: string): ReadonlyArray<string> =>
  execFileSync(busybox, ["--list"], { encoding: "utf8" })
    .split("\n")
    .filter((name) => /^[A-Za-z0-9_.[-]+$/.test(name) && name !== "busybox")

/**
 * Shifts the owner of every entry under `dir` (itself included) by `uidBase`: a tree made by host
 * root becomes owned by the sandbox's root, uid 0 inside. Entries already shifted stay as they are.
 */
export const shiftOwnership = async (dir: string, uidBase: number): Promise<void> => {
  const shift = (id: number) => (id >= uidBase ? id : uidBase + id)
  const visit = async (path: string): Promise<void> => {
    const st = await Fs.lstat(path)
    if (st.isDirectory()) {
      for (const name of await Fs.readdir(path)) await visit(NodePath.join(path, name))
    }
    await Fs.lchown(path, shift(st.uid), shift(st.gid))
    // chown clears set-id bits: put them back (busybox is not setuid, but a template may hold some).
    if (!st.isSymbolicLink() && (st.mode & 0o6000) !== 0) await Fs.chmod(path, st.mode & 0o7777)
  }
  await visit(dir)
}

/**
 * Returns the folder of the base template under `templatesDir`, building it when absent: owned
 * by the sandboxes' root (`uidBase` on the host), so root inside owns its files and nobody else
 * on the host does. Idempotent and safe against concurrent builders (the loser's rename fails
 * and it cleans up).
 */
export const ensureBaseTemplate = async (
  templatesDir: string,
  busybox: string,
  uidBase: number,
  options: BaseTemplateOptions = {}
): Promise<string> => {
  const curlPath = options.curl ?? "/usr/bin/curl"
  const curl = FsSync.existsSync(curlPath) ? curlPath : undefined
  const version = versionOf(options, curl)
  const target = NodePath.join(templatesDir, `${BASE_TEMPLATE}`)
  const marker = NodePath.join(target, "etc", "svc-template")
  const versionFile = NodePath.join(templatesDir, `.${BASE_TEMPLATE}.version`)
  const current = await Fs.readFile(versionFile, "utf8").catch(() => "")
  const owner = await Fs.lstat(target).then((st) => st.uid, () => -1)
  if (current.trim() === version && owner === uidBase && (await exists(marker))) return target

  await Fs.mkdir(templatesDir, { recursive: true })
  const temp = await Fs.mkdtemp(NodePath.join(templatesDir, `.${BASE_TEMPLATE}.build-`))
  try {
    for (const [dir, mode] of dirs) {
      await Fs.mkdir(NodePath.join(temp, dir), { recursive: true })
      await Fs.chmod(NodePath.join(temp, dir), mode)
    }
    await Fs.copyFile(busybox, NodePath.join(temp, "bin", "busybox"))
    await Fs.chmod(NodePath.join(temp, "bin", "busybox"), 0o755)
    for (const applet of applets(busybox)) {
      // Everything in /bin keeps links relative and inside the tree.
      await Fs.symlink("busybox", NodePath.join(temp, "bin", applet)).catch((e: NodeJS.ErrnoException) => {
        if (e.code !== "EEXIST") throw e
      })
    }
    for (const [file, content, mode] of files) {
      await Fs.writeFile(NodePath.join(temp, file), content, { mode })
      await Fs.chmod(NodePath.join(temp, file), mode)
    }
    const resolv = options.nameserver === undefined ? "" : `nameserver ${options.nameserver}\n`
    await Fs.writeFile(NodePath.join(temp, "etc/resolv.conf"), resolv, { mode: 0o644 })
    if (curl !== undefined) {
      await Fs.copyFile(curl, NodePath.join(temp, "usr/bin/curl"))
      await Fs.chmod(NodePath.join(temp, "usr/bin/curl"), 0o755)
      // Each library at the path the loader looks for it (the host's layout: /lib64, /lib/<triplet>).
      for (const lib of sharedLibraries(curl)) {
        const into = NodePath.join(temp, lib)
        await Fs.mkdir(NodePath.dirname(into), { recursive: true })
        await Fs.copyFile(lib, into, FsSync.constants.COPYFILE_FICLONE)
        await Fs.chmod(into, 0o755)
      }
    }
    const hostBundle = await Fs.readFile(HOST_CA_BUNDLE, "utf8").catch(() => "")
    const bundle = hostBundle + (options.trustedCaPem === undefined ? "" : `\n${options.trustedCaPem.trim()}\n`)
    await Fs.writeFile(NodePath.join(temp, "etc/ssl/certs/ca-certificates.crt"), bundle, { mode: 0o644 })
    await Fs.chmod(temp, 0o755)
    await shiftOwnership(temp, uidBase)
    if (await exists(target)) {
      // An older version: move it aside and keep it, since running sandboxes still read it
      // as their lower layer.
      const old = NodePath.join(templatesDir, `.${BASE_TEMPLATE}.old-${process.pid}-${Date.now()}`)
      await Fs.rename(target, old).catch(() => undefined)
    }
    try {
      await Fs.rename(temp, target)
    } catch (e) {
      // Another builder won the race: its tree is as good as ours.
      if (!(await exists(marker)) || (await Fs.lstat(target)).uid !== uidBase) throw e
    }
    await Fs.writeFile(versionFile, version + "\n")
    return target
  } finally {
    await Fs.rm(temp, { recursive: true, force: true }).catch(() => undefined)
  }
}

const exists = (path: string): Promise<boolean> => Fs.lstat(path).then(() => true, () => false)
