/**
 * Each running sandbox is a host uid range of its own (`Confinement.slotUid`), so a per-user
 * kernel limit taken by one tenant is not taken from another; files on disk stay owned by the
 * canonical range (`uidBase`), seen by each sandbox through idmapped mounts (`native/idmap.h`),
 * so a file keeps its owner inside across stop and start, a layer made from one sandbox's disk,
 * and a volume shared by two sandboxes.
 */
import { assert, layer } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { randomBytes } from "node:crypto"
import * as FsSync from "node:fs"
import * as NodePath from "node:path"
import { ID_COUNT, slotUid } from "../src/Driver/Confinement.ts"
import { digestFile } from "../src/ImageLayers.ts"
import {
  exec,
  makeTestDriver,
  sh,
  spec,
  staticProbe,
  TestDriver,
  text,
  uniqueId,
  withSandbox
} from "./fixtures/support.ts"

/** The host uid that root inside is: the first extent of its uid map. */
const hostRoot = (uidMap: string) => Number(uidMap.trim().split(/\s+/)[1])

const volumeId = () => {
  const alphabet = "0123456789abcdefghjkmnpqrstvwxyz"
  return `vol_0${Array.from(randomBytes(25), (b) => alphabet[b % 32]).join("")}`
}

/** The slot leases of the machine that name a sandbox of `dataDir`: slot → sandbox id. */
const leasesOf = (slotDir: string, dataDir: string) => {
  const found: Record<string, string> = {}
  for (const name of FsSync.readdirSync(slotDir)) {
    try {
      const owner = JSON.parse(FsSync.readFileSync(NodePath.join(slotDir, name), "utf8")) as {
        dataDir: string
        sandboxId: string
      }
      if (owner.dataDir === dataDir) found[name] = owner.sandboxId
    } catch {
      // Released meanwhile (another agent's).
    }
  }
  return found
}

/** The parent of a sandbox's init: its host-side bubblewrap, in the mount namespace that holds its disk. */
const monitorOf = (pid: number) =>
  Number(/^PPid:\s*(\d+)$/m.exec(FsSync.readFileSync(`/proc/${pid}/status`, "utf8"))![1])

layer(TestDriver.layer(), { excludeTestServices: true })("a uid range per sandbox", (it) => {
  it.effect(
    "a sandbox that takes every inotify instance its uid may have takes none of another's",
    () =>
      Effect.gen(function*() {
        const { driver, config } = yield* TestDriver
        const probe = yield* staticProbe("inotify-probe")
        const a = uniqueId("ino")
        const b = uniqueId("ino")
        yield* withSandbox(driver, spec(a))
        yield* withSandbox(driver, spec(b))
        const ids: Array<number> = []
        for (const id of [a, b]) {
          yield* driver.writeFile(id, "/root/probe", probe, 0o755)
          ids.push(hostRoot(text((yield* driver.exec(id, sh("cat /proc/self/uid_map"))).stdout)))
        }
        // Two ranges of their own, above the files' range, apart.
        for (const uid of ids) {
          assert.isAbove(uid, config.uidBase)
          assert.strictEqual((uid - config.uidBase) % ID_COUNT, 0)
        }
        assert.notStrictEqual(ids[0], ids[1])

        // A opens instances until the kernel refuses, and keeps them.
        const holding = yield* Effect.forkChild(driver.exec(a, exec(["/root/probe", "hold", "/root/held"])))
        let held = ""
        for (let i = 0; i < 300 && held === ""; i++) {
          held = text((yield* driver.exec(a, sh("cat /root/held 2>/dev/null || true"))).stdout)
          if (held === "") yield* Effect.sleep("50 millis")
        }
        const match = /^held (\d+) (\S+)$/m.exec(held)
        assert.isNotNull(match, held)
        assert.strictEqual(match![2], "EMFILE", held)
        assert.isAbove(Number(match![1]), 0, held)
        // A has none left, B has its own (before: one uid for all, and B's inotify_init failed too).
        assert.strictEqual(text((yield* driver.exec(a, exec(["/root/probe", "one"]))).stdout), "EMFILE\n")
        assert.strictEqual(text((yield* driver.exec(b, exec(["/root/probe", "one"]))).stdout), "ok\n")
        yield* Fiber.interrupt(holding)
      }).pipe(Effect.scoped),
    120_000
  )

  it.effect(
    "files keep their owner: on disk the files' range, inside their id, across stop and start",
    () =>
      Effect.gen(function*() {
        const { driver, config, dataDir } = yield* TestDriver
        const id = uniqueId("own")
        const info = yield* withSandbox(driver, spec(id))
        const made = yield* driver.exec(
          id,
          sh("mkdir -p /home/app && echo hi > /home/app/f && chown -R 1000:1001 /home/app && echo x >> /etc/hostname")
        )
        assert.strictEqual(made.exitCode, 0, text(made.stderr))
        const uid = hostRoot(text((yield* driver.exec(id, sh("cat /proc/self/uid_map"))).stdout))
        // The host sees the sandbox's files through its root as its range...
        const seen = FsSync.statSync(`/proc/${info.pid}/root/home/app/f`)
        assert.deepStrictEqual([seen.uid, seen.gid], [uid + 1000, uid + 1001])
        // ...and stored on its disk as the files' range (a copied-up file of the template too).
        const upper = `/proc/${monitorOf(info.pid!)}/root${NodePath.join(dataDir, "sandboxes", id, "disk", "upper")}`
        const stored = FsSync.statSync(`${upper}/home/app/f`)
        assert.deepStrictEqual([stored.uid, stored.gid], [config.uidBase + 1000, config.uidBase + 1001])
        const copied = FsSync.statSync(`${upper}/etc/hostname`)
        assert.deepStrictEqual([copied.uid, copied.gid], [config.uidBase, config.uidBase])

        yield* driver.stop(id)
        yield* driver.start(id)
        const after = yield* driver.exec(id, sh("stat -c '%u:%g' /home/app/f /home/app /etc/hostname /; id -u"))
        assert.strictEqual(text(after.stdout), "1000:1001\n1000:1001\n0:0\n0:0\n0\n", text(after.stderr))
      }).pipe(Effect.scoped),
    120_000
  )

  it.effect(
    "a layer made from one sandbox's disk keeps its owners in another sandbox (another range)",
    () =>
      Effect.gen(function*() {
        const { driver, dataDir } = yield* TestDriver
        const first = uniqueId("lay")
        yield* withSandbox(driver, spec(first))
        const made = yield* driver.exec(
          first,
          sh("mkdir -p /srv/app && echo hi > /srv/app/f && chown -R 1000:1000 /srv/app")
        )
        assert.strictEqual(made.exitCode, 0, text(made.stderr))
        const file = NodePath.join(dataDir, "export", `${first}.tar`)
        yield* driver.exportLayer(first, file)
        const digest = yield* Effect.promise(() => digestFile(file))
        yield* driver.importLayer(digest, file)

        const second = uniqueId("lay")
        yield* withSandbox(driver, spec(second, { layers: [digest] }))
        const maps = yield* Effect.forEach([first, second], (id) => driver.exec(id, sh("cat /proc/self/uid_map")))
        assert.notStrictEqual(hostRoot(text(maps[0]!.stdout)), hostRoot(text(maps[1]!.stdout)))
        // Its own files (in the lower layer) and a copy-up of one, owned as made.
        const seen = yield* driver.exec(
          second,
          sh("stat -c '%u:%g' /srv/app/f /srv/app; echo more >> /srv/app/f && stat -c '%u:%g' /srv/app/f")
        )
        assert.strictEqual(text(seen.stdout), "1000:1000\n1000:1000\n1000:1000\n", text(seen.stderr))
      }).pipe(Effect.scoped),
    120_000
  )

  it.effect(
    "slots are leased machine-wide: two agents never share one; adopt hands it over, destroy gives it back",
    () =>
      Effect.gen(function*() {
        const { driver, config, dataDir } = yield* TestDriver
        // Another agent of the machine (its own data dir and host id, the same slot folder).
        const other = yield* makeTestDriver()
        assert.strictEqual(other.config.slotDir, config.slotDir)
        const a = uniqueId("slot")
        const b = uniqueId("slot")
        yield* withSandbox(driver, spec(a))
        yield* withSandbox(other.driver, spec(b))
        const mine = leasesOf(config.slotDir, dataDir)
        const theirs = leasesOf(config.slotDir, other.dataDir)
        const slotA = Object.keys(mine).find((slot) => mine[slot] === a)!
        const slotB = Object.keys(theirs).find((slot) => theirs[slot] === b)!
        assert.isDefined(slotA)
        assert.isDefined(slotB)
        assert.notStrictEqual(slotA, slotB)
        const uidA = hostRoot(text((yield* driver.exec(a, sh("cat /proc/self/uid_map"))).stdout))
        assert.strictEqual(uidA, slotUid(config.uidBase, Number(slotA)))

        // Adopted under a new id, it keeps running as the same range, now leased to the new id.
        const adopted = uniqueId("slot")
        yield* driver.adopt(a, spec(adopted))
        yield* Effect.addFinalizer(() => driver.destroy(adopted).pipe(Effect.ignore))
        assert.strictEqual(leasesOf(config.slotDir, dataDir)[slotA], adopted)
        assert.strictEqual(hostRoot(text((yield* driver.exec(adopted, sh("cat /proc/self/uid_map"))).stdout)), uidA)
        yield* driver.destroy(adopted)
        assert.isUndefined(leasesOf(config.slotDir, dataDir)[slotA])
        assert.strictEqual(leasesOf(config.slotDir, other.dataDir)[slotB], b)
      }).pipe(Effect.scoped),
    120_000
  )

  it.effect(
    "a sandbox recorded before uid ranges (no slot, files as the files' range) gets one at its next start",
    () =>
      Effect.gen(function*() {
        const { driver, config, dataDir } = yield* TestDriver
        const id = uniqueId("old")
        yield* withSandbox(driver, spec(id))
        yield* driver.exec(id, sh("echo kept > /root/kept && chown 1000:1000 /root/kept"))
        yield* driver.stop(id)
        // As an older driver left it: no `uidSlot`, no lease.
        const file = NodePath.join(dataDir, "sandboxes", id, "sandbox.json")
        const { uidSlot, ...older } = JSON.parse(FsSync.readFileSync(file, "utf8")) as { uidSlot: number }
        FsSync.writeFileSync(file, JSON.stringify(older))
        FsSync.rmSync(NodePath.join(config.slotDir, String(uidSlot)))
        yield* driver.start(id)
        const seen = yield* driver.exec(id, sh("stat -c '%u:%g' /root/kept; cat /proc/self/uid_map"))
        const [owner, map] = text(seen.stdout).split("\n")
        assert.strictEqual(owner, "1000:1000")
        const slot = (JSON.parse(FsSync.readFileSync(file, "utf8")) as { uidSlot?: number }).uidSlot
        assert.isDefined(slot)
        assert.strictEqual(hostRoot(map!), slotUid(config.uidBase, slot!))
        assert.strictEqual(leasesOf(config.slotDir, dataDir)[String(slot)], id)
      }).pipe(Effect.scoped),
    120_000
  )

  it.effect(
    "a shared volume: what one sandbox writes, the other sees with its owner; on disk the files' range",
    () =>
      Effect.gen(function*() {
        const { driver, config } = yield* TestDriver
        const volume = {
          volumeId: volumeId(),
          type: "shared" as const,
          sizeGb: 1,
          mountPath: "/data",
          subpath: "",
          mode: "rw" as const
        }
        // After the sandboxes (finalizers run last first): the machine's mount of the volume goes.
        yield* Effect.addFinalizer(() => driver.removeVolume(volume.volumeId, "shared").pipe(Effect.ignore))
        const a = uniqueId("vol")
        const b = uniqueId("vol")
        yield* withSandbox(driver, spec(a, { volumes: [volume] }))
        yield* withSandbox(driver, spec(b, { volumes: [volume] }))
        const wrote = yield* driver.exec(a, sh("echo hi > /data/f && chown 1000:1000 /data/f && mkdir /data/d"))
        assert.strictEqual(wrote.exitCode, 0, text(wrote.stderr))
        const seen = yield* driver.exec(
          b,
          sh("stat -c '%u:%g' /data/f /data/d /data && echo more >> /data/f && cat /data/f")
        )
        assert.strictEqual(text(seen.stdout), "1000:1000\n0:0\n0:0\nhi\nmore\n", text(seen.stderr))
        const mount = NodePath.join(config.sharedVolumesDir, `${volume.volumeId}.mnt`)
        assert.strictEqual(FsSync.statSync(NodePath.join(mount, "f")).uid, config.uidBase + 1000)
        assert.strictEqual(FsSync.statSync(NodePath.join(mount, "d")).uid, config.uidBase)
        // Folders svc-start makes: a subpath in the volume, a mount path in the root; both root's inside.
        const c = uniqueId("vol")
        yield* withSandbox(
          driver,
          spec(c, { volumes: [{ ...volume, subpath: "made/here", mountPath: "/mnt/deep/v" }] })
        )
        const made = yield* driver.exec(c, sh("stat -c '%u:%g' /mnt/deep /mnt/deep/v && touch /mnt/deep/v/t"))
        assert.strictEqual(text(made.stdout), "0:0\n0:0\n", text(made.stderr))
        for (const name of ["made", "made/here", "made/here/t"]) {
          const st = FsSync.statSync(NodePath.join(mount, name))
          assert.deepStrictEqual([st.uid, st.gid], [config.uidBase, config.uidBase], name)
        }
        // Both sandboxes run as ranges of their own, neither the files' range.
        for (const id of [a, b, c]) {
          const uid = hostRoot(text((yield* driver.exec(id, sh("cat /proc/self/uid_map"))).stdout))
          assert.isAtLeast(uid, slotUid(config.uidBase, 0))
        }
      }).pipe(Effect.scoped),
    120_000
  )
})
