/**
 * The seccomp filter every process of a sandbox runs under: its init (given to bubblewrap) and
 * every exec and file operation (loaded by `svc-enter`). A pure function from the policy below to
 * the classic-BPF program the kernel takes (`struct sock_filter[]`), so it can be read and tested
 * apart from the processes that load it.
 *
 * The policy follows Docker's and Podman's default profiles, stricter where they allow a call only
 * with a capability a sandbox never has: kernel modules, kexec, mounts and the new mount API,
 * namespaces (`unshare`, `setns`, namespace flags of `clone`), keyrings, BPF, perf, io_uring,
 * handle-based opens, clock and swap changes, and every foreign ABI (x32, i386 through
 * `int 0x80`). Refused calls answer EPERM, as Docker's do; `clone3` answers ENOSYS so that libc
 * falls back to `clone`, whose flags can be checked (clone3 passes them in memory).
 *
 * Reviewed against moby's `profiles/seccomp/default.json` (2026-11): Docker allows a list and
 * refuses the rest; this filter refuses a list, so every x86_64 call Docker's list leaves out
 * (without the capabilities a sandbox lacks) is named below, and calls numbered past the last
 * one known here (`FIRST_UNKNOWN`) answer ENOSYS: a kernel newer than this list adds nothing a
 * sandbox can call. `socket(AF_VSOCK)` answers EAFNOSUPPORT (as on a kernel without vsock;
 * Docker refuses it since 23.0): vsock is not namespaced, the firewall does not see it, and
 * these hosts are VMs whose hypervisor listens on it. Where this filter is stricter than
 * Docker's: io_uring, userfaultfd, keyrings, the memory-policy calls and process_vm_*,
 * pidfd_getfd, kcmp (ptrace itself is allowed, for a sandbox's own processes: its init is not
 * dumpable, `native/svc-init.c`).
 */

/** x86_64 numbers of the calls a sandbox may not make. */
const DENIED_X86_64: Readonly<Record<string, number>> = {
  uselib: 134,
  ustat: 136,
  sysfs: 139,
  pivot_root: 155,
  _sysctl: 156,
  acct: 163,
  settimeofday: 164,
  mount: 165,
  umount2: 166,
  swapon: 167,
  swapoff: 168,
  reboot: 169,
  iopl: 172,
  ioperm: 173,
  create_module: 174,
  init_module: 175,
  delete_module: 176,
  get_kernel_syms: 177,
  query_module: 178,
  quotactl: 179,
  nfsservctl: 180,
  lookup_dcookie: 212,
  clock_settime: 227,
  mbind: 237,
  set_mempolicy: 238,
  get_mempolicy: 239,
  kexec_load: 246,
  add_key: 248,
  request_key: 249,
  keyctl: 250,
  unshare: 272,
  move_pages: 279,
  perf_event_open: 298,
  fanotify_init: 300,
  name_to_handle_at: 303,
  open_by_handle_at: 304,
  clock_adjtime: 305,
  setns: 308,
  process_vm_readv: 310,
  process_vm_writev: 311,
  kcmp: 312,
  finit_module: 313,
  kexec_file_load: 320,
  bpf: 321,
  userfaultfd: 323,
  io_uring_setup: 425,
  io_uring_enter: 426,
  io_uring_register: 427,
  open_tree: 428,
  move_mount: 429,
  fsopen: 430,
  fsconfig: 431,
  fsmount: 432,
  fspick: 433,
  pidfd_getfd: 438,
  mount_setattr: 442,
  quotactl_fd: 443,
  syslog: 103,
  vhangup: 153,
  // Not in Docker's list without CAP_SYS_ADMIN (the hostname is set from the host only).
  sethostname: 170,
  setdomainname: 171,
  // Never implemented: Docker's list leaves them out.
  getpmsg: 181,
  putpmsg: 182,
  afs_syscall: 183,
  tuxcall: 184,
  security: 185,
  vserver: 236,
  // Memory placement of other processes (CAP_SYS_NICE in Docker's) and process_madvise
  // (CAP_SYS_PTRACE in Docker's).
  migrate_pages: 256,
  process_madvise: 440,
  set_mempolicy_home_node: 450,
  // The mount table by id, and the new mount API's open_tree with attributes.
  statmount: 457,
  listmount: 458,
  open_tree_attr: 467
}

const SYS_SOCKET = 41
const SYS_CLONE = 56
const SYS_CLONE3 = 435
const SYS_PERSONALITY = 135

/** CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME */
export const NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 |
  0x40000000 | 0x00000080

/** The personalities Docker allows: Linux, with and without ADDR_NO_RANDOMIZE / UNAME26, and the query. */
const PERSONALITIES = [0x0, 0x8, 0x20000, 0x20008, 0xffffffff]

/** Calls from this number on (file_setattr, 469, is the last one known here) answer ENOSYS. */
export const FIRST_UNKNOWN = 470

export const AF_VSOCK = 40

const AUDIT_ARCH_X86_64 = 0xc000003e
const X32_SYSCALL_BIT = 0x40000000

const RET_KILL_PROCESS = 0x80000000
const RET_ALLOW = 0x7fff0000
const retErrno = (errno: number) => 0x00050000 | errno
export const EPERM = 1
export const ENOSYS = 38
export const EAFNOSUPPORT = 97

// Offsets in struct seccomp_data (little-endian): nr, arch, instruction pointer, args.
const OFFSET_NR = 0
const OFFSET_ARCH = 4
const OFFSET_ARG0_LOW = 16

interface Instruction {
  readonly code: number
  readonly jt: number
  readonly jf: number
  readonly k: number
}

const LD_ABS = 0x20 // BPF_LD | BPF_W | BPF_ABS
const JEQ = 0x15 // BPF_JMP | BPF_JEQ | BPF_K
const JGE = 0x35 // BPF_JMP | BPF_JGE | BPF_K
const JSET = 0x45 // BPF_JMP | BPF_JSET | BPF_K
const RET = 0x06 // BPF_RET | BPF_K

const load = (offset: number): Instruction => ({ code: LD_ABS, jt: 0, jf: 0, k: offset })
const jump = (code: number, k: number, jt: number, jf: number): Instruction => ({ code, jt, jf, k })
const ret = (k: number): Instruction => ({ code: RET, jt: 0, jf: 0, k })

/** One rule: the instructions run when the call's number matches; they always end in a return. */
const rule = (nr: number, body: ReadonlyArray<Instruction>): ReadonlyArray<Instruction> => [
  jump(JEQ, nr, 0, body.length),
  ...body
]

/** The filter's instructions, in order. */
export const program = (): ReadonlyArray<Instruction> => {
  const personality = [
    load(OFFSET_ARG0_LOW),
    ...PERSONALITIES.map((value, i) => jump(JEQ, value, PERSONALITIES.length - i, 0)),
    ret(retErrno(EPERM)),
    ret(RET_ALLOW)
  ]
  return [
    load(OFFSET_ARCH),
    jump(JEQ, AUDIT_ARCH_X86_64, 1, 0),
    ret(RET_KILL_PROCESS),
    load(OFFSET_NR),
    jump(JGE, X32_SYSCALL_BIT, 0, 1),
    ret(retErrno(EPERM)),
    jump(JGE, FIRST_UNKNOWN, 0, 1),
    ret(retErrno(ENOSYS)),
    ...Object.values(DENIED_X86_64).flatMap((nr) => rule(nr, [ret(retErrno(EPERM))])),
    // socket's first argument is the address family.
    ...rule(SYS_SOCKET, [
      load(OFFSET_ARG0_LOW),
      jump(JEQ, AF_VSOCK, 0, 1),
      ret(retErrno(EAFNOSUPPORT)),
      ret(RET_ALLOW)
    ]),
    ...rule(SYS_CLONE3, [ret(retErrno(ENOSYS))]),
    // clone's first argument holds its flags (x86_64 passes them in a register).
    ...rule(SYS_CLONE, [
      load(OFFSET_ARG0_LOW),
      jump(JSET, NAMESPACE_FLAGS, 0, 1),
      ret(retErrno(EPERM)),
      ret(RET_ALLOW)
    ]),
    ...rule(SYS_PERSONALITY, personality),
    ret(RET_ALLOW)
  ]
}

/** The program as the kernel takes it: 8 bytes per instruction (u16 code, u8 jt, u8 jf, u32 k). */
export const compile = (): Buffer => {
  const instructions = program()
  const out = Buffer.alloc(instructions.length * 8)
  instructions.forEach((ins, i) => {
    if (ins.jt > 255 || ins.jf > 255) throw new Error("seccomp: jump too far")
    out.writeUInt16LE(ins.code, i * 8)
    out.writeUInt8(ins.jt, i * 8 + 2)
    out.writeUInt8(ins.jf, i * 8 + 3)
    out.writeUInt32LE(ins.k >>> 0, i * 8 + 4)
  })
  return out
}

/** The calls the filter refuses outright, by name (for documentation and tests). */
export const deniedCalls = (): ReadonlyArray<string> => Object.keys(DENIED_X86_64)

/** The filter is written for this architecture only; elsewhere the driver refuses to start. */
export const supportedArch = (arch: string = process.arch): boolean => arch === "x64"
