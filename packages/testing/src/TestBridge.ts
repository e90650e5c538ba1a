/**
 * A sandbox bridge of the test file's own for the roles it starts as processes. An agent started
 * from the environment runs the egress proxy, and one bridge serves one platform (@svc/egress/Owner):
 * two test files running at once are two platforms (their own NATS prefixes), so each gets its
 * own bridge, subnet and egress ports. The slot is claimed machine-wide (a file per slot, taken
 * over from a process that is gone) and the bridge and its firewall table go when the file's
 * process exits.
 */
import { freePort } from "@svc/local-servers/Servers"
import { execFileSync } from "node:child_process"
import * as Fs from "node:fs"
import * as NodePath from "node:path"

const SLOTS_DIR = "/run/svc-sandboxes/test-bridges"

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM"
  }
}

/** Takes a free slot 0..255: a file created exclusively, or one whose process is gone. */
const claimSlot = (): number => {
  // The hosts' run folder must stay walkable (o+x) by the sandboxes' uids: a recursive mkdir
  // would give it the slots folder's 0700 on a machine where it does not exist yet.
  Fs.mkdirSync(NodePath.dirname(SLOTS_DIR), { recursive: true, mode: 0o711 })
  Fs.mkdirSync(SLOTS_DIR, { recursive: true, mode: 0o700 })
  for (let slot = 0; slot < 256; slot++) {
    const file = `${SLOTS_DIR}/${slot}`
    try {
      Fs.writeFileSync(file, String(process.pid), { flag: "wx", mode: 0o600 })
      return slot
    } catch {
      const owner = Number(Fs.readFileSync(file, "utf8"))
      if (Number.isInteger(owner) && owner > 0 && alive(owner)) continue
      // The owner is gone: remove its file and race for the slot like anyone else.
      Fs.rmSync(file, { force: true })
      try {
        Fs.writeFileSync(file, String(process.pid), { flag: "wx", mode: 0o600 })
        return slot
      } catch {
        continue
      }
    }
  }
  throw new Error(`no free test bridge slot in ${SLOTS_DIR}`)
}

const quiet = (cmd: string, args: ReadonlyArray<string>) => {
  try {
    execFileSync(cmd, args, { stdio: "ignore" })
  } catch {
    // absent already
  }
}

let claimed: Promise<Record<string, string>> | undefined

/**
 * `SVC_SANDBOX_BRIDGE`, `SVC_SANDBOX_SUBNET`, `SVC_EGRESS_PORT` and `SVC_EGRESS_DNS_PORT` of this
 * test file's bridge (the same for every role the file starts: one platform).
 */
export const testBridgeEnv = (): Promise<Record<string, string>> => {
  claimed ??= (async () => {
    const slot = claimSlot()
    const bridge = `svt${slot.toString(16).padStart(2, "0")}`
    process.once("exit", () => {
      quiet("ip", ["link", "del", bridge])
      quiet("nft", ["delete", "table", "inet", `svc_${bridge}`])
      Fs.rmSync(`${SLOTS_DIR}/${slot}`, { force: true })
    })
    return {
      SVC_SANDBOX_BRIDGE: bridge,
      SVC_SANDBOX_SUBNET: `10.219.${slot}.0/24`,
      SVC_EGRESS_PORT: String(await freePort()),
      SVC_EGRESS_DNS_PORT: String(await freePort())
    }
  })()
  return claimed
}
