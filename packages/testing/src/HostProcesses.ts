/**
 * The processes in a host's sandbox cgroups, found through /proc: what the tests of the agent,
 * the roles and the dev stack check a host's sandboxes left behind (none after a stop).
 */
import * as FsSync from "node:fs"

/** The pids of processes in the host's sandbox cgroups (pids controller, else memory). */
export const processesOfHost = (hostId: string): ReadonlyArray<number> => processCgroupsOfHost(hostId).map((p) => p.pid)

/**
 * The same with the cgroup file as read then: read it once (a process that exits meanwhile
 * shows the root cgroups while it is a zombie, on v1).
 */
export const processCgroupsOfHost = (
  hostId: string
): ReadonlyArray<{ readonly pid: number; readonly cgroup: string }> => {
  const found: Array<{ pid: number; cgroup: string }> = []
  for (const name of FsSync.readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue
    try {
      const cgroup = FsSync.readFileSync(`/proc/${name}/cgroup`, "utf8")
      if (cgroup.includes(`/svc-sandboxes/${hostId}/`)) found.push({ pid: Number(name), cgroup })
    } catch {
      // Gone meanwhile.
    }
  }
  return found
}
