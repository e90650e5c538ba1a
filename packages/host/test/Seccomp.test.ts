/** The seccomp program as the kernel reads it: checked instruction by instruction (the pure half). */
import { assert, describe, it } from "vitest"
import {
  AF_VSOCK,
  compile,
  deniedCalls,
  EAFNOSUPPORT,
  ENOSYS,
  EPERM,
  FIRST_UNKNOWN,
  NAMESPACE_FLAGS,
  program
} from "../src/Driver/Seccomp.ts"

const RET_KILL_PROCESS = 0x80000000
const RET_ALLOW = 0x7fff0000

describe("Seccomp", () => {
  const ins = program()

  it("checks the architecture first and kills any other ABI", () => {
    assert.deepStrictEqual(ins[0], { code: 0x20, jt: 0, jf: 0, k: 4 })
    assert.deepStrictEqual(ins[1], { code: 0x15, jt: 1, jf: 0, k: 0xc000003e })
    assert.deepStrictEqual(ins[2], { code: 0x06, jt: 0, jf: 0, k: RET_KILL_PROCESS })
  })

  it("ends in allow, and every jump lands inside the program", () => {
    assert.deepStrictEqual(ins[ins.length - 1], { code: 0x06, jt: 0, jf: 0, k: RET_ALLOW })
    ins.forEach((i, n) => {
      if ((i.code & 0x07) === 0x05) {
        assert.isBelow(n + 1 + i.jt, ins.length)
        assert.isBelow(n + 1 + i.jf, ins.length)
      }
    })
  })

  it("answers EPERM for every denied call and for clone with a namespace flag", () => {
    assert.include(deniedCalls(), "mount")
    assert.include(deniedCalls(), "unshare")
    assert.include(deniedCalls(), "setns")
    assert.include(deniedCalls(), "bpf")
    const eperm = 0x00050000 | EPERM
    // Each denied call: a JEQ on its number whose next instruction returns EPERM.
    const denied = ins.filter((i, n) => i.code === 0x15 && i.jt === 0 && i.jf === 1 && ins[n + 1]?.k === eperm)
    assert.strictEqual(denied.length, deniedCalls().length)
    const clone = ins.findIndex((i) => i.code === 0x15 && i.k === 56)
    assert.deepStrictEqual(ins[clone + 2], { code: 0x45, jt: 0, jf: 1, k: NAMESPACE_FLAGS })
    assert.strictEqual(ins[clone + 3]!.k, eperm)
  })

  it("refuses socket(AF_VSOCK) with EAFNOSUPPORT, calls past the known ones with ENOSYS", () => {
    const socket = ins.findIndex((i) => i.code === 0x15 && i.k === 41)
    assert.deepStrictEqual(ins[socket + 1], { code: 0x20, jt: 0, jf: 0, k: 16 })
    assert.deepStrictEqual(ins[socket + 2], { code: 0x15, jt: 0, jf: 1, k: AF_VSOCK })
    assert.strictEqual(ins[socket + 3]!.k, 0x00050000 | EAFNOSUPPORT)
    assert.strictEqual(ins[socket + 4]!.k, RET_ALLOW)
    const unknown = ins.findIndex((i) => i.code === 0x35 && i.k === FIRST_UNKNOWN)
    assert.strictEqual(ins[unknown + 1]!.k, 0x00050000 | ENOSYS)
    for (
      const call of ["sethostname", "process_madvise", "migrate_pages", "statmount", "listmount", "open_tree_attr"]
    ) {
      assert.include(deniedCalls(), call)
    }
  })

  it("compiles to 8 bytes per instruction, little-endian", () => {
    const bytes = compile()
    assert.strictEqual(bytes.length, ins.length * 8)
    assert.strictEqual(bytes.readUInt32LE(4 + 8), 0xc000003e)
  })
})
