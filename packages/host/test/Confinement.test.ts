/** The sandboxes' uid ranges against this host's users and groups (the agent's start-up refusal). */
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { assert, describe, it } from "vitest"
import { DEFAULT_UID_BASE, DEFAULT_UID_SLOTS } from "../src/Driver/Config.ts"
import { capabilityHex, ID_COUNT, rangeConflict, slotsOverflow, slotUid } from "../src/Driver/Confinement.ts"

const write = async (dir: string, text: string) => {
  const file = NodePath.join(dir, "subuid")
  await Fs.writeFile(file, text)
  return file
}

describe("Confinement", () => {
  it("refuses a uid range that holds a host user, and takes the default one", async () => {
    // uid 1..65536 holds daemon, nobody and every login user of this machine.
    const conflict = await rangeConflict(1)
    assert.match(conflict ?? "", /^\/etc\/passwd: \S+ has id \d+$/)
    assert.isUndefined(await rangeConflict(DEFAULT_UID_BASE))
    assert.isUndefined(await rangeConflict(DEFAULT_UID_BASE, DEFAULT_UID_SLOTS))
  })

  it("puts each sandbox's range above the files' range, and refuses slots past the uid space", async () => {
    assert.strictEqual(slotUid(DEFAULT_UID_BASE, 0), 0x8000_0000)
    assert.strictEqual(slotUid(DEFAULT_UID_BASE, 1) - slotUid(DEFAULT_UID_BASE, 0), ID_COUNT)
    assert.isUndefined(slotsOverflow(DEFAULT_UID_BASE, DEFAULT_UID_SLOTS))
    assert.isUndefined(slotsOverflow(DEFAULT_UID_BASE, 32_767))
    assert.match(slotsOverflow(DEFAULT_UID_BASE, 32_768) ?? "", /at most 32767$/)
    // The ranges above the base count: a subordinate range among them is refused (a user's
    // processes would share one sandbox's limits).
    const dir = await Fs.mkdtemp("/tmp/svc-range-")
    try {
      const busy = slotUid(100_000, 3) + 5
      assert.isUndefined(await rangeConflict(100_000, 3, { subuid: await write(dir, `a:${busy}:10\n`) }))
      assert.match(await rangeConflict(100_000, 4, { subuid: await write(dir, `a:${busy}:10\n`) }) ?? "", /a's range/)
    } finally {
      await Fs.rm(dir, { recursive: true, force: true })
    }
  })

  it("keeps Docker's capability set without NET_RAW and MKNOD, never SYS_ADMIN or NET_ADMIN", () => {
    const mask = BigInt(`0x${capabilityHex()}`)
    const has = (bit: number) => (mask & (1n << BigInt(bit))) !== 0n
    assert.isTrue(has(0) && has(1) && has(5) && has(10)) // CHOWN, DAC_OVERRIDE, KILL, NET_BIND_SERVICE
    for (const bit of [12, 13, 16, 21, 27]) assert.isFalse(has(bit), `cap ${bit}`) // NET_ADMIN, NET_RAW, SYS_MODULE, SYS_ADMIN, MKNOD
  })
})
