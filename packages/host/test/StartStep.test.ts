/**
 * `svc-start` (native/svc-start.c) on its own, as the driver runs it: every step it takes before
 * it becomes the program it was given (bubblewrap in the driver; a shell here that reports what
 * it got), and the exit code and message of each step that fails.
 */
import { execFileSync, spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { afterAll, assert, beforeAll, describe, it } from "vitest"
import * as Cgroups from "../src/Driver/Cgroups.ts"
import { DEFAULT_UID_BASE } from "../src/Driver/Config.ts"
import { isAttached } from "../src/Driver/Disk.ts"
import * as Native from "../src/Driver/Native.ts"

const UID = DEFAULT_UID_BASE

interface Ran {
  readonly pid: number
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

/** Runs svc-start with fds 0-2 only, as a detached child, and waits for it. */
const runStart = (binary: string, args: ReadonlyArray<string>) =>
  new Promise<Ran>((resolve, reject) => {
    const child = spawn(binary, args as Array<string>, {
      stdio: ["ignore", "pipe", "pipe"],
      env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin" }
    })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()))
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()))
    child.on("error", reject)
    child.on("close", (code) => resolve({ pid: child.pid!, code, stdout, stderr }))
  })

describe("svc-start", () => {
  let dir: string
  let binary: string
  const paths = () => ({
    lower: NodePath.join(dir, "lower"),
    image: NodePath.join(dir, "disk.img"),
    disk: NodePath.join(dir, "disk"),
    root: NodePath.join(dir, "root"),
    seccomp: NodePath.join(dir, "filter.bpf")
  })
  /** Arguments up to `--`, each step's input valid unless replaced. */
  const options = (replace: Record<string, string> = {}, cgroups: ReadonlyArray<string> = []) => {
    const p = paths()
    const given: Record<string, string> = {
      "--image": p.image,
      "--image-mount": p.disk,
      "--lower": p.lower,
      "--upper": NodePath.join(p.disk, "upper"),
      "--work": NodePath.join(p.disk, "work"),
      "--root": p.root,
      "--seccomp": p.seccomp,
      "--uid": String(UID),
      ...replace
    }
    return [...cgroups.flatMap((file) => ["--cgroup", file]), ...Object.entries(given).flat()]
  }

  beforeAll(async () => {
    dir = await Fs.mkdtemp("/tmp/svc-start-test-")
    binary = await Native.build(NodePath.join(dir, "host"), "svc-start")
    // The unprivileged uid must walk to the root, as bubblewrap must in the driver.
    await Fs.chmod(dir, 0o755)
    const p = paths()
    for (const folder of [p.lower, p.disk, p.root]) await Fs.mkdir(folder, { mode: 0o755 })
    await Fs.writeFile(NodePath.join(p.lower, "from-lower"), "lower\n")
    await Fs.writeFile(p.seccomp, Buffer.alloc(64), { mode: 0o600 })
    // An image as the driver formats one: upper/ (the sandbox root's) and work/.
    const skeleton = NodePath.join(dir, "skeleton")
    await Fs.mkdir(NodePath.join(skeleton, "upper"), { recursive: true, mode: 0o755 })
    await Fs.mkdir(NodePath.join(skeleton, "work"), { mode: 0o700 })
    await Fs.chown(NodePath.join(skeleton, "upper"), UID, UID)
    await Fs.writeFile(p.image, "")
    await Fs.truncate(p.image, 32 * 1024 * 1024)
    execFileSync("mkfs.ext4", ["-q", "-F", "-m", "0", "-d", skeleton, p.image])
  })

  afterAll(async () => {
    await Fs.rm(dir, { recursive: true, force: true })
  })

  it("runs the program in a private mount namespace over the image and the overlay, in the cgroups, as the sandboxes' uid with no groups or capabilities, with the filter on fd 6, under the same pid", async () => {
    const hostId = `start-${randomBytes(3).toString("hex")}`
    const cgroups = Cgroups.make({ root: "/sys/fs/cgroup", hostId })
    const id = `s-${randomBytes(3).toString("hex")}`
    const prepared = await cgroups.prepare(id, { ramMb: 64, cpu: 1, pidsMax: 64, diskGb: 1 })
    try {
      assert.isAbove(prepared.procsFiles.length, 0)
      const { root, image, disk, seccomp } = paths()
      const report = [
        "echo pid=$$",
        "echo ids=$(id -u):$(id -g):$(id -G)",
        "grep CapEff /proc/self/status",
        "echo fd6=$(readlink /proc/self/fd/6)",
        "cat /proc/self/cgroup",
        `cat ${root}/from-lower`,
        `echo written > ${root}/new && stat -c owner=%u ${root}/new`,
        `echo mounted=$(grep -c ' ${disk} ' /proc/self/mountinfo)`
      ].join("; ")
      const ran = await runStart(binary, [...options({}, prepared.procsFiles), "--", "/bin/sh", "-c", report])
      assert.strictEqual(ran.code, 0, ran.stderr)
      const lines = ran.stdout.split("\n")
      // exec all the way: the process spawned is the program.
      assert.include(lines, `pid=${ran.pid}`)
      assert.include(lines, `ids=${UID}:${UID}:${UID}`)
      assert.include(lines, "CapEff:\t0000000000000000")
      assert.include(lines, `fd6=${seccomp}`)
      // /proc/self/cgroup: `N:controllers:/path` per hierarchy (v1), `0::/path` (v2).
      const inGroup = lines.filter((line) => line.endsWith(`:/svc-sandboxes/${hostId}/${id}`))
      if (cgroups.version === "v2") assert.lengthOf(inGroup, 1, ran.stdout)
      for (const file of prepared.procsFiles) {
        const controller = NodePath.relative("/sys/fs/cgroup", file).split("/")[0]!
        if (cgroups.version === "v1") {
          assert.isTrue(
            inGroup.some((line) => line.split(":")[1]!.split(",").includes(controller)),
            `${file}: ${ran.stdout}`
          )
        }
      }
      assert.include(lines, "lower")
      assert.include(lines, `owner=${UID}`)
      assert.include(lines, "mounted=1")
      // The host's mount table never had either mount; the loop device went with the namespace.
      const mountinfo = await Fs.readFile("/proc/self/mountinfo", "utf8")
      assert.notInclude(mountinfo, disk)
      assert.notInclude(mountinfo, root)
      assert.isFalse(FsSync.existsSync(NodePath.join(root, "new")))
      for (let i = 0; i < 100 && isAttached(image); i++) await new Promise((resolve) => setTimeout(resolve, 20))
      assert.isFalse(isAttached(image))
    } finally {
      await cgroups.removeAll(id)
      await cgroups.removeHost()
    }
  })

  it("with --file-uid, the program (--uid) sees the layers' files as its own through idmapped mounts; what it writes is stored as --file-uid", async () => {
    const { root, disk } = paths()
    const own = UID + 65536
    const report = [
      "echo ids=$(id -u):$(id -g)",
      `stat -c root=%u:%g ${root}`,
      `cat ${root}/from-lower && stat -c lower=%u ${root}/from-lower`,
      `echo written > ${root}/mapped && stat -c seen=%u:%g ${root}/mapped`,
      // The image as mounted (no idmap): the stored owner.
      `stat -c stored=%u:%g ${disk}/upper/mapped`
    ].join("; ")
    const ran = await runStart(binary, [
      ...options({ "--uid": String(own), "--file-uid": String(UID) }),
      "--",
      "/bin/sh",
      "-c",
      report
    ])
    assert.strictEqual(ran.code, 0, ran.stderr)
    const lines = ran.stdout.split("\n")
    assert.include(lines, `ids=${own}:${own}`)
    assert.include(lines, `root=${own}:${own}`)
    // The host's root stays itself (the lower folder here is root's): read as before.
    assert.include(lines, "lower")
    assert.include(lines, "lower=0")
    assert.include(lines, `seen=${own}:${own}`)
    assert.include(lines, `stored=${UID}:${UID}`)
  })

  it("fails each step with its own exit code and says what failed", async () => {
    const { lower, image, root } = paths()
    const missing = NodePath.join(dir, "missing")
    const program = ["--", "/bin/true"]
    const cases: ReadonlyArray<readonly [string, ReadonlyArray<string>, number, string]> = [
      ["usage", [...options({ "--uid": "0" }), ...program], 120, "svc-start: bad --uid"],
      ["usage", options(), 120, "svc-start: usage"],
      ["usage", [...options({ "--nofile": "3" }), ...program], 120, "svc-start: bad --nofile"],
      ["usage", [...options({ "--file-uid": "0" }), ...program], 120, "svc-start: bad --file-uid"],
      [
        "cgroup",
        [...options({}, [`${missing}/cgroup.procs`]), ...program],
        125,
        `svc-start: joining the cgroup of ${missing}/cgroup.procs: No such file or directory`
      ],
      [
        "image",
        [...options({ "--image": missing }), ...program],
        122,
        `svc-start: open ${missing}: No such file or directory`
      ],
      [
        "overlay",
        [...options({ "--lower": missing }), ...program],
        124,
        // The layers are opened first (the overlay is given them as /proc/self/fd/N).
        `svc-start: open ${missing}: No such file or directory`
      ],
      [
        "seccomp",
        [...options({ "--seccomp": missing }), ...program],
        123,
        `svc-start: open ${missing}: No such file or directory`
      ],
      ["program", [...options(), "--", missing], 127, `svc-start: ${missing}: No such file or directory`],
      ["program", [...options(), "--", lower], 126, `svc-start: ${lower}: Permission denied`]
    ]
    for (const [step, args, code, message] of cases) {
      const ran = await runStart(binary, args)
      assert.strictEqual(ran.code, code, `${step}: ${ran.stderr}`)
      assert.strictEqual(ran.stderr.trim(), message, step)
    }
    // Whatever failed, nothing stayed mounted or attached.
    for (let i = 0; i < 100 && isAttached(image); i++) await new Promise((resolve) => setTimeout(resolve, 20))
    assert.isFalse(isAttached(image))
    assert.notInclude(await Fs.readFile("/proc/self/mountinfo", "utf8"), root)
  })
})
