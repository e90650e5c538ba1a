/**
 * The `debian` root: a minimal Debian (bookworm, minbase) with a shell, apt, ca-certificates,
 * curl and python3, built by the platform itself with `mmdebstrap` from Debian's packages.
 *
 * Two steps, each cached:
 * - the **archive**: mmdebstrap's tar, kept in a cache folder as `debian-<recipe key>.tar` (the
 *   recipe key is a digest of everything that decides its content: suite, variant, packages,
 *   mirror, the hooks below). Built once per cache folder: hosts of one machine (and the test
 *   suite's agents) share it; a second builder waits on the first's lock.
 * - the **root**: the archive extracted as `<templates>/debian-<key>`, owned by the sandboxes'
 *   root, with this host's resolver and the egress proxy's CA in its trust store (what `base`
 *   gets too, see `Rootfs.ts`); `key` digests the archive's content digest and those settings,
 *   so the root is named by what it holds.
 *
 * The `code` root is the same recipe with Debian's python3-numpy, python3-pandas,
 * python3-matplotlib and nodejs (their recommended packages left out), named `code-<key>`: built
 * and cached the same way, the first time a `code` sandbox or template needs it.
 *
 * apt inside a sandbox fetches as root (`APT::Sandbox::User`): the sandbox's root is already an
 * unprivileged host uid, and a second drop to `_apt` buys nothing there.
 */
import { execFile } from "node:child_process"
import { createHash } from "node:crypto"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { digestFile } from "./ImageLayers.ts"
import { shiftOwnership } from "./Rootfs.ts"

export const DEBIAN_ROOT = "debian"
export const CODE_ROOT = "code"

export interface DebianRecipe {
  readonly suite: string
  readonly variant: string
  readonly packages: ReadonlyArray<string>
  readonly mirror: string
  /** Leave out what the packages only recommend (absent: apt's default, recommends installed). */
  readonly noRecommends?: true
}

export const DEFAULT_RECIPE: DebianRecipe = {
  suite: "bookworm",
  variant: "minbase",
  packages: ["ca-certificates", "curl", "python3"],
  mirror: "http://deb.debian.org/debian"
}

/** The `code` root: debian with python's data stack and node, for code contexts. */
export const CODE_RECIPE: DebianRecipe = {
  ...DEFAULT_RECIPE,
  packages: [...DEFAULT_RECIPE.packages, "python3-numpy", "python3-pandas", "python3-matplotlib", "nodejs"],
  noRecommends: true
}

const HOOK_VERSION = "1"
const APT_CONF = "APT::Sandbox::User \"root\";\nAcquire::Retries \"3\";\n"

/** Digest of everything that decides the archive's content. */
export const recipeKey = (recipe: DebianRecipe): string =>
  createHash("sha256").update(JSON.stringify([HOOK_VERSION, APT_CONF, recipe])).digest("hex").slice(0, 24)

const HOST_ENV = { PATH: "/usr/sbin:/usr/bin:/sbin:/bin" }

const run = (file: string, args: ReadonlyArray<string>, timeoutMs: number) =>
  new Promise<string>((resolve, reject) => {
    execFile(file, args, { env: HOST_ENV, timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 }, (error, out, err) => {
      if (error) reject(new Error(`${NodePath.basename(file)}: ${(String(err) || error.message).trim().slice(-1500)}`))
      else resolve(String(out) + String(err))
    })
  })

/**
 * How long mmdebstrap may take: `code` (190 MiB of packages) took over 15 min on a busy machine
 * of two cores shared with seven other builds and test runs.
 */
const BUILD_TIMEOUT_MS = 30 * 60_000

const MMDEBSTRAP = ["/usr/bin/mmdebstrap", "/usr/sbin/mmdebstrap"]

const exists = (path: string): Promise<boolean> => Fs.lstat(path).then(() => true, () => false)
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** Whether a process of this pid exists (EPERM: it does, another user's). */
const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM"
  }
}

/**
 * The archive of `recipe` in `cacheDir`, built when absent (about a minute, network to the
 * mirror needed). `log` gets mmdebstrap's output lines.
 */
export const ensureDebianArchive = async (
  cacheDir: string,
  recipe: DebianRecipe = DEFAULT_RECIPE,
  log: (line: string) => void = () => undefined
): Promise<{ readonly file: string; readonly digest: string }> => {
  const key = recipeKey(recipe)
  const file = NodePath.join(cacheDir, `debian-${key}.tar`)
  const digestPath = `${file}.sha256`
  const lock = `${file}.lock`
  await Fs.mkdir(cacheDir, { recursive: true })
  for (;;) {
    if (await exists(digestPath)) {
      return { file, digest: (await Fs.readFile(digestPath, "utf8")).trim() }
    }
    // One builder per cache folder (across processes): mkdir is atomic.
    const locked = await Fs.mkdir(lock).then(() => true, () => false)
    if (!locked) {
      // A builder that died (killed with its test run) leaves its lock: its pid is gone, or, if
      // it died before writing it, the lock is older than a build may take.
      const st = await Fs.stat(lock).catch(() => undefined)
      const owner = await Fs.readFile(NodePath.join(lock, "pid"), "utf8").then(Number, () => undefined)
      const stale = (owner !== undefined && !alive(owner)) ||
        (st !== undefined && Date.now() - st.mtimeMs > BUILD_TIMEOUT_MS + 5 * 60_000)
      if (stale) await Fs.rm(lock, { recursive: true, force: true })
      else await sleep(1000)
      continue
    }
    await Fs.writeFile(NodePath.join(lock, "pid"), String(process.pid))
    try {
      const temp = `${file}.tmp-${process.pid}`
      // A dead builder's half-written archive.
      for (const name of await Fs.readdir(cacheDir)) {
        if (name.startsWith(`${NodePath.basename(file)}.tmp-`)) {
          await Fs.rm(NodePath.join(cacheDir, name), { force: true })
        }
      }
      log(`building the debian root (${recipe.suite}, ${recipe.packages.join(", ")}) with mmdebstrap`)
      const found = await Promise.all(MMDEBSTRAP.map(exists))
      const program = MMDEBSTRAP[found.indexOf(true)]
      if (program === undefined) throw new Error("mmdebstrap is not installed (infra/bootstrap.sh installs it)")
      const output = await run(program, [
        "--mode=root",
        `--variant=${recipe.variant}`,
        `--include=${recipe.packages.join(",")}`,
        ...(recipe.noRecommends === true ? ["--aptopt=APT::Install-Recommends \"false\""] : []),
        "--format=tar",
        `--customize-hook=printf '%s' '${APT_CONF}' > "$1/etc/apt/apt.conf.d/99svc"`,
        // Nothing of the build host's resolver stays in the archive.
        "--customize-hook=rm -f \"$1/etc/resolv.conf\" \"$1/etc/hostname\"",
        recipe.suite,
        temp,
        recipe.mirror
      ], BUILD_TIMEOUT_MS)
      for (const line of output.split("\n").filter((l) => l.startsWith("I: success") || l.startsWith("W:"))) log(line)
      const digest = await digestFile(temp)
      await Fs.rename(temp, file)
      await Fs.writeFile(digestPath, digest + "\n")
      return { file, digest }
    } finally {
      await Fs.rm(lock, { recursive: true, force: true })
    }
  }
}

export interface DebianRootOptions {
  readonly trustedCaPem?: string
  readonly nameserver?: string
}

/**
 * The `debian` root folder under `templatesDir` (its template name returned: `debian-<key>`),
 * extracted from the archive when absent.
 */
export const ensureDebianRoot = async (
  templatesDir: string,
  archive: { readonly file: string; readonly digest: string },
  uidBase: number,
  options: DebianRootOptions = {},
  rootName: string = DEBIAN_ROOT
): Promise<string> => {
  const key = createHash("sha256")
    .update(JSON.stringify([archive.digest, options.trustedCaPem ?? "", options.nameserver ?? ""]))
    .digest("hex").slice(0, 24)
  const name = `${rootName}-${key}`
  const target = NodePath.join(templatesDir, name)
  if (await exists(NodePath.join(target, "etc", "debian_version"))) return name
  await Fs.mkdir(templatesDir, { recursive: true })
  const temp = await Fs.mkdtemp(NodePath.join(templatesDir, `.${name}.build-`))
  try {
    await run(
      "tar",
      ["--extract", "--file", archive.file, "--numeric-owner", "--same-permissions", "-C", temp],
      600_000
    )
    await Fs.writeFile(
      NodePath.join(temp, "etc/resolv.conf"),
      options.nameserver === undefined ? "" : `nameserver ${options.nameserver}\n`,
      { mode: 0o644 }
    )
    if (options.trustedCaPem !== undefined) {
      const bundle = NodePath.join(temp, "etc/ssl/certs/ca-certificates.crt")
      const have = await Fs.readFile(bundle, "utf8").catch(() => "")
      await Fs.writeFile(bundle, have + `\n${options.trustedCaPem.trim()}\n`, { mode: 0o644 })
      // update-ca-certificates rebuilds the bundle from this folder: the CA stays trusted after it.
      await Fs.mkdir(NodePath.join(temp, "usr/local/share/ca-certificates"), { recursive: true })
      await Fs.writeFile(NodePath.join(temp, "usr/local/share/ca-certificates/svc-egress.crt"), options.trustedCaPem)
    }
    await Fs.writeFile(NodePath.join(temp, "etc/svc-template"), `${rootName}\n`, { mode: 0o644 })
    await Fs.chmod(temp, 0o755)
    await shiftOwnership(temp, uidBase)
    await Fs.rename(temp, target).catch(async (e) => {
      if (!(await exists(NodePath.join(target, "etc", "debian_version")))) throw e
    })
    return name
  } finally {
    await Fs.rm(temp, { recursive: true, force: true }).catch(() => undefined)
  }
}

/** Whether a debian (or `code`) root was extracted under `templatesDir` (any recipe or options). */
export const hasDebianRoot = async (templatesDir: string, rootName: string = DEBIAN_ROOT): Promise<boolean> => {
  const names = await Fs.readdir(templatesDir).catch(() => [] as Array<string>)
  for (const name of names) {
    if (
      name.startsWith(`${rootName}-`) && (await exists(NodePath.join(templatesDir, name, "etc", "debian_version")))
    ) {
      return true
    }
  }
  return false
}
