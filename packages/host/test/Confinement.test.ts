/** The sandboxes' uid range against this host's users and groups (the agent's start-up refusal). */
import { assert, describe, it } from "vitest"
import { DEFAULT_UID_BASE } from "../src/Driver/Config.ts"
import { capabilityHex, rangeConflict } from "../src/Driver/Confinement.ts"

describe("Confinement", () => {
  it("refuses a uid range that holds a host user, and takes the default one", async () => {
    // uid 1..65536 holds daemon, nobody and every login user of this machine.
    const conflict = await rangeConflict(1)
    assert.match(conflict ?? "", /^\/etc\/passwd: \S+ has id \d+$/)
    assert.isUndefined(await rangeConflict(DEFAULT_UID_BASE))
  })

  it("keeps Docker's capability set without NET_RAW and MKNOD, never SYS_ADMIN or NET_ADMIN", () => {
    const mask = BigInt(`0x${capabilityHex()}`)
    const has = (bit: number) => (mask & (1n << BigInt(bit))) !== 0n
    assert.isTrue(has(0) && has(1) && has(5) && has(10)) // CHOWN, DAC_OVERRIDE, KILL, NET_BIND_SERVICE
    for (const bit of [12, 13, 16, 21, 27]) assert.isFalse(has(bit), `cap ${bit}`) // NET_ADMIN, NET_RAW, SYS_MODULE, SYS_ADMIN, MKNOD
  })
})
