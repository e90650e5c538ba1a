/**
 * Volumes in real sandboxes, through the public API, with two real agents on this machine
 * (Volumes.support): the size enforced inside, `ro` and `subpath`, the data kept after its
 * sandbox is deleted, a sandbox with a local volume placed on the volume's host, a shared
 * volume seen by sandboxes of both hosts at once, a delete refused while attached, and the
 * storage gone from the hosts once the volume is deleted.
 */
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as NodePath from "node:path"
import {
  api,
  createSandbox,
  createVolume,
  deleteSandbox,
  Env,
  EnvLayer,
  eventually,
  exists,
  expectError,
  getVolume,
  isAttached,
  runningSandbox,
  sh,
  waitState
} from "./Volumes.support.ts"

layer(EnvLayer, { excludeTestServices: true, timeout: 300_000 })("volumes in sandboxes", (it) => {
  it.effect("a local volume: attached, shown on both records, its size enforced inside, its data kept after the sandbox", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const volume = yield* createVolume({ name: "work", size_gb: 1 })
      const first = yield* runningSandbox({
        region: env.a.region,
        volumes: [{ volume_id: volume.id, mount_path: "/data" }]
      })
      expect(first.hostId).toBe(env.a.hostId)
      expect(first.volume_attachments).toEqual([{
        volume_id: volume.id,
        type: "local",
        driver: "local",
        mount_path: "/data",
        subpath: "",
        mode: "rw",
        attachment_id: expect.stringMatching(/^vat_/),
        device_path: expect.stringMatching(/^\/dev\/loop\d+$/)
      }])
      const attachment = first.volume_attachments[0]
      const attached = yield* getVolume(volume.id)
      expect(attached).toMatchObject({
        state: "attached",
        host_id: env.a.hostId,
        attached_to: first.id,
        attachment_id: attachment.attachment_id,
        mount_path: "/data",
        device_path: attachment.device_path
      })
      expect(attached.attachments).toEqual([{
        attachment_id: attachment.attachment_id,
        sandbox_id: first.id,
        host_id: env.a.hostId,
        mount_path: "/data",
        subpath: "",
        mode: "rw",
        device_path: attachment.device_path
      }])
      // The image lives on host A and is what the loop device holds.
      const image = NodePath.join(env.a.dataDir, "volumes", `${volume.id}.img`)
      expect(exists(image)).toBe(true)
      expect(isAttached(image)).toBe(true)

      // Inside: its own file system of 1 GiB, writable by the sandbox's root; past it, ENOSPC.
      const df = yield* sh(first.id, "df -k /data | tail -1")
      const kib = Number(df.stdout.trim().split(/\s+/)[1])
      expect(kib).toBeGreaterThan(900 * 1024)
      expect(kib).toBeLessThanOrEqual(1024 * 1024)
      const kept = yield* sh(first.id, "echo kept > /data/note && mkdir -p /data/dir && cat /data/note")
      expect(kept).toMatchObject({ exit_code: 0, stdout: "kept\n" })
      const fill = yield* sh(first.id, "dd if=/dev/zero of=/data/big bs=1M count=1300 2>&1; echo rc=$?")
      expect(fill.stdout).toContain("No space left on device")
      expect(fill.stdout).not.toContain("rc=0")
      const size = yield* sh(first.id, "ls -l /data/big | awk '{print $5}'")
      expect(Number(size.stdout)).toBeLessThan(1024 ** 3)
      // The sandbox's own disk is another file system: it was not the one filled.
      expect((yield* sh(first.id, "echo fine > /root/own && cat /root/own")).stdout).toBe("fine\n")
      yield* sh(first.id, "rm /data/big")

      // Attached: the volume cannot be deleted, nor taken by a second sandbox.
      expectError(yield* api("DELETE", `/v1/volumes/${volume.id}`), 409, "conflict")
      const second = yield* api("POST", "/v1/sandboxes", {
        body: { volumes: [{ volume_id: volume.id, mount_path: "/data" }] }
      })
      expectError(second, 409, "conflict")

      // The sandbox goes; the data stays, and the next sandbox finds it.
      yield* deleteSandbox(first.id)
      const free = yield* getVolume(volume.id)
      expect(free).toMatchObject({ state: "available", attached_to: null, attachment_id: null, device_path: null })
      expect(free.attachments).toEqual([])
      expect(exists(image)).toBe(true)
      const next = yield* runningSandbox({ volumes: [{ volume_id: volume.id, mount_path: "/mnt/again" }] })
      expect(next.hostId).toBe(env.a.hostId)
      expect((yield* sh(next.id, "cat /mnt/again/note; ls -d /mnt/again/dir")).stdout).toBe("kept\n/mnt/again/dir\n")
      yield* deleteSandbox(next.id)

      // Deleted: its image leaves host A.
      const deleted = yield* api("DELETE", `/v1/volumes/${volume.id}`)
      expect(deleted.status, deleted.text).toBe(200)
      expect(deleted.json.state).toBe("deleted")
      yield* eventually(Effect.sync(() => exists(image)), (there) => !there)
      expectError(
        yield* api("POST", "/v1/sandboxes", { body: { volumes: [{ volume_id: volume.id, mount_path: "/data" }] } }),
        400,
        "invalid_request"
      )
    }))

  it.effect("placement: a sandbox with a local volume goes to the volume's host, not where it would go without it", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const volume = yield* createVolume({ size_gb: 1 })
      const pinning = yield* runningSandbox({
        region: env.a.region,
        volumes: [{ volume_id: volume.id, mount_path: "/v" }]
      })
      expect(pinning.hostId).toBe(env.a.hostId)
      yield* sh(pinning.id, "echo from-a > /v/where")
      yield* deleteSandbox(pinning.id)
      // Without a volume the scheduler prefers host B (more free memory).
      const plain = yield* createSandbox({})
      expect(plain.hostId).toBe(env.b.hostId)
      // With it: host A, the only one holding its data.
      const follows = yield* runningSandbox({ volumes: [{ volume_id: volume.id, mount_path: "/v" }] })
      expect(follows.hostId).toBe(env.a.hostId)
      expect((yield* sh(follows.id, "cat /v/where")).stdout).toBe("from-a\n")
      yield* deleteSandbox(follows.id)
      // Asking for the other host's region cannot be met: the sandbox ends in error saying why.
      const elsewhere = yield* createSandbox({
        region: env.b.region,
        volumes: [{ volume_id: volume.id, mount_path: "/v" }]
      })
      const failed = yield* waitState(elsewhere.id, "error")
      expect(failed.errorMessage).toBe(
        `the host of its local volumes (${env.a.hostId}) is not live in region ${env.b.region}`
      )
      yield* deleteSandbox(elsewhere.id)
      yield* api("DELETE", `/v1/sandboxes/${plain.id}`)
    }))

  it.effect("ro and subpath: a read-only mount cannot be written, even by root; a subpath shows only its folder", () =>
    Effect.gen(function*() {
      const volume = yield* createVolume({ name: "layout", size_gb: 1 })
      const writer = yield* runningSandbox({ volumes: [{ volume_id: volume.id, mount_path: "/all" }] })
      yield* sh(writer.id, "mkdir -p /all/team/x && echo inside > /all/team/x/f && echo outside > /all/top")
      yield* deleteSandbox(writer.id)

      const reader = yield* runningSandbox({
        volumes: [{ volume_id: volume.id, mount_path: "/x", subpath: "team/x", mode: "ro" }]
      })
      expect(reader.volume_attachments[0]).toMatchObject({ mount_path: "/x", subpath: "team/x", mode: "ro" })
      expect((yield* sh(reader.id, "cat /x/f; ls /x")).stdout).toBe("inside\nf\n")
      // Only the subpath: the rest of the volume is not there.
      expect((yield* sh(reader.id, "ls /x/.. ; cat /x/../top 2>&1; echo rc=$?")).stdout).not.toContain("outside")
      const write = yield* sh(reader.id, "touch /x/new 2>&1; echo rc=$?")
      expect(write.stdout).toContain("Read-only file system")
      expect(write.stdout).toContain("rc=1")
      const remount = yield* sh(reader.id, "mount -o remount,rw /x 2>&1; touch /x/new 2>&1; echo rc=$?")
      expect(remount.stdout).toContain("rc=1")
      yield* deleteSandbox(reader.id)

      // A subpath that is not there yet is made (owned by the sandbox's root).
      const fresh = yield* runningSandbox({
        volumes: [{ volume_id: volume.id, mount_path: "/new", subpath: "made/here" }]
      })
      expect((yield* sh(fresh.id, "echo ok > /new/f && cat /new/f && stat -c %u /new")).stdout).toBe("ok\n0\n")
      yield* deleteSandbox(fresh.id)
    }))

  it.effect("a symbolic link in the volume never leads out of it: a subpath through a link is refused", () =>
    Effect.gen(function*() {
      const volume = yield* createVolume({ name: "links", size_gb: 1 })
      const maker = yield* runningSandbox({ volumes: [{ volume_id: volume.id, mount_path: "/v" }] })
      yield* sh(maker.id, "ln -s /etc /v/escape && mkdir /v/real && echo real > /v/real/f")
      yield* deleteSandbox(maker.id)
      const through = yield* createSandbox({ volumes: [{ volume_id: volume.id, mount_path: "/v", subpath: "escape" }] })
      const failed = yield* waitState(through.id, "error")
      expect(failed.errorMessage).toMatch(/could not start the sandbox/)
      yield* deleteSandbox(through.id)
      const fine = yield* runningSandbox({ volumes: [{ volume_id: volume.id, mount_path: "/v", subpath: "real" }] })
      expect((yield* sh(fine.id, "cat /v/f")).stdout).toBe("real\n")
      yield* deleteSandbox(fine.id)
    }))

  it.effect("a shared volume: two sandboxes on two hosts see each other's writes at once; delete waits for both", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const volume = yield* createVolume({ name: "exchange", type: "shared", size_gb: 1 })
      const onA = yield* runningSandbox({
        region: env.a.region,
        volumes: [{ volume_id: volume.id, mount_path: "/shared" }]
      })
      const onB = yield* runningSandbox({
        region: env.b.region,
        volumes: [{ volume_id: volume.id, mount_path: "/mnt/s", subpath: "drop", mode: "rw" }]
      })
      expect([onA.hostId, onB.hostId]).toEqual([env.a.hostId, env.b.hostId])
      yield* sh(onA.id, "mkdir -p /shared/drop && echo from-a > /shared/drop/a")
      expect((yield* sh(onB.id, "cat /mnt/s/a")).stdout).toBe("from-a\n")
      yield* sh(onB.id, "echo from-b > /mnt/s/b")
      expect((yield* sh(onA.id, "cat /shared/drop/b")).stdout).toBe("from-b\n")
      // One file system, its size for all of them together.
      const fill = yield* sh(onA.id, "dd if=/dev/zero of=/shared/big bs=1M count=1300 2>&1; echo rc=$?")
      expect(fill.stdout).toContain("No space left on device")
      const full = yield* sh(onB.id, "dd if=/dev/zero of=/mnt/s/more bs=1M count=8 2>&1; echo rc=$?")
      expect(full.stdout).toContain("No space left on device")
      yield* sh(onA.id, "rm /shared/big")

      const record = yield* getVolume(volume.id)
      expect(record).toMatchObject({ state: "attached", host_id: null, attached_to: onA.id, mount_path: "/shared" })
      expect(record.attachments.map((a: any) => [a.sandbox_id, a.host_id, a.mount_path, a.subpath])).toEqual([
        [onA.id, env.a.hostId, "/shared", ""],
        [onB.id, env.b.hostId, "/mnt/s", "drop"]
      ])
      expect(record.device_path).toMatch(/^\/dev\/loop\d+$/)
      // Both hosts use the machine's one mount: one loop device.
      expect(record.attachments[1].device_path).toBe(record.device_path)

      expectError(yield* api("DELETE", `/v1/volumes/${volume.id}`), 409, "conflict")
      yield* deleteSandbox(onA.id)
      expectError(yield* api("DELETE", `/v1/volumes/${volume.id}`), 409, "conflict")
      expect((yield* getVolume(volume.id)).attached_to).toBe(onB.id)
      yield* deleteSandbox(onB.id)
      const deleted = yield* api("DELETE", `/v1/volumes/${volume.id}`)
      expect(deleted.status, deleted.text).toBe(200)
      // Its image and the machine's mount go.
      const image = NodePath.join(env.sharedDir, `${volume.id}.img`)
      yield* eventually(
        Effect.sync(() => exists(image) || exists(NodePath.join(env.sharedDir, `${volume.id}.mnt`))),
        (there) => !there
      )
    }))
})
