/**
 * Sandbox networking: one host bridge, a veth pair per sandbox (one end in the sandbox's net
 * namespace), and an `internalIp` per sandbox leased machine-wide.
 *
 * Leases are files `<leaseDir>/<ip>` created with O_EXCL: the kernel makes the claim atomic,
 * so several agent processes on one machine never hand out the same address.
 */
import { randomBytes } from "node:crypto"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"

/** The sandboxes' bridge network on this host: the host takes the gateway, sandboxes lease the rest. */
export interface SandboxSubnet {
  readonly base: number
  readonly prefix: number
  readonly gateway: string
  /** First and last address a sandbox may get. */
  readonly first: number
  readonly last: number
}

export const ipToInt = (ip: string): number => ip.split(".").reduce((acc, part) => acc * 256 + Number(part), 0)

export const intToIp = (n: number): string => [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join(".")

/** Pure: the addresses of `10.213.0.0/16`-style subnets (host takes the first). */
export const parseSubnet = (cidr: string): SandboxSubnet => {
  const [address, bits] = cidr.split("/") as [string, string]
  const prefix = Number(bits)
  const size = 2 ** (32 - prefix)
  const base = Math.floor(ipToInt(address) / size) * size
  return { base, prefix, gateway: intToIp(base + 1), first: base + 2, last: base + size - 2 }
}

/** The host end's name (at most 15 bytes) derived from the address: unique while the lease is. */
export const vethNames = (ip: string): { readonly host: string } => {
  const hex = ipToInt(ip).toString(16).padStart(8, "0")
  return { host: `sv${hex}` }
}

/** The counters of the host end of a sandbox's veth, or undefined when it has none (no network). */
export const linkBytes = async (ip: string): Promise<{ readonly rx: number; readonly tx: number } | undefined> => {
  const dir = `/sys/class/net/${vethNames(ip).host}/statistics`
  try {
    const [rx, tx] = await Promise.all([Fs.readFile(`${dir}/rx_bytes`, "utf8"), Fs.readFile(`${dir}/tx_bytes`, "utf8")])
    return { rx: Number(rx.trim()), tx: Number(tx.trim()) }
  } catch {
    return undefined
  }
}

export interface LeaseOwner {
  readonly dataDir: string
  readonly sandboxId: string
}

const ownerText = (owner: LeaseOwner) => JSON.stringify({ dataDir: owner.dataDir, sandboxId: owner.sandboxId }) + "\n"

/** A lease file's owner, read synchronously (a few bytes in the page cache: no thread-pool hop). */
const readOwner = async (file: string): Promise<LeaseOwner | undefined> => {
  try {
    const parsed = JSON.parse(FsSync.readFileSync(file, "utf8")) as unknown
    if (
      typeof parsed === "object" && parsed !== null &&
      typeof (parsed as LeaseOwner).dataDir === "string" && typeof (parsed as LeaseOwner).sandboxId === "string"
    ) return parsed as LeaseOwner
    return undefined
  } catch {
    return undefined
  }
}

// Leases are a few bytes each in one folder: read and claimed synchronously (no thread-pool hop
// per call on a create's path); each call stays the same atomic step for the other agents.
const exists = async (path: string) => FsSync.lstatSync(path, { throwIfNoEntry: false }) !== undefined

/** A lease whose owner's data dir no longer holds that sandbox: left by a removed agent or test. */
const isStale = async (owner: LeaseOwner | undefined): Promise<boolean> =>
  owner !== undefined && !(await exists(NodePath.join(owner.dataDir, "sandboxes", owner.sandboxId)))

const tryClaim = async (leaseDir: string, ip: string, owner: LeaseOwner): Promise<boolean> => {
  try {
    FsSync.writeFileSync(NodePath.join(leaseDir, ip), ownerText(owner), { flag: "wx" })
    return true
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "EEXIST") return false
    throw e
  }
}

/**
 * Takes a stale lease over. Renaming is atomic: exactly one contender gets the file; if what
 * it got is not the stale lease it inspected (someone reclaimed and re-leased meanwhile), it
 * puts it back.
 */
const reclaim = async (leaseDir: string, ip: string, stale: string, owner: LeaseOwner): Promise<boolean> => {
  const file = NodePath.join(leaseDir, ip)
  const tomb = `${file}.reclaim-${randomBytes(6).toString("hex")}`
  try {
    await Fs.rename(file, tomb)
  } catch {
    return false
  }
  const got = await Fs.readFile(tomb, "utf8").catch(() => "")
  if (got !== stale) {
    await Fs.link(tomb, file).catch(() => undefined)
    await Fs.unlink(tomb).catch(() => undefined)
    return false
  }
  await Fs.unlink(tomb).catch(() => undefined)
  return tryClaim(leaseDir, ip, owner)
}

/** Leases `preferred` if it is free or already ours, else the first free address of the subnet. */
export const lease = (
  leaseDir: string,
  subnet: SandboxSubnet,
  owner: LeaseOwner,
  preferred?: string
): Promise<string | undefined> =>
  leaseName(
    leaseDir,
    { first: subnet.first, last: subnet.last, nameOf: intToIp, indexOf: ipToInt },
    owner,
    preferred
  )

/**
 * Leases `preferred` if it is free or already ours, else the first free name of `names`
 * (`nameOf(first..last)`): the machine's addresses, or its sandboxes' uid ranges (`Confinement.ts`).
 */
export const leaseName = async (
  leaseDir: string,
  names: {
    readonly first: number
    readonly last: number
    readonly nameOf: (n: number) => string
    readonly indexOf: (name: string) => number
  },
  owner: LeaseOwner,
  preferred?: string
): Promise<string | undefined> => {
  FsSync.mkdirSync(leaseDir, { recursive: true })
  const attempt = async (name: string): Promise<boolean> => {
    if (await tryClaim(leaseDir, name, owner)) return true
    const file = NodePath.join(leaseDir, name)
    let text: string | undefined
    try {
      text = FsSync.readFileSync(file, "utf8")
    } catch {
      text = undefined
    }
    if (text === undefined) return tryClaim(leaseDir, name, owner)
    if (text === ownerText(owner)) return true
    let parsed: LeaseOwner | undefined
    try {
      parsed = JSON.parse(text) as LeaseOwner
    } catch {
      parsed = undefined
    }
    if (await isStale(parsed)) return reclaim(leaseDir, name, text, owner)
    return false
  }
  if (preferred !== undefined) {
    const n = names.indexOf(preferred)
    if (n >= names.first && n <= names.last && (await attempt(preferred))) return preferred
  }
  const taken = new Set(FsSync.readdirSync(leaseDir))
  for (let n = names.first; n <= names.last; n++) {
    const name = names.nameOf(n)
    if (taken.has(name)) continue
    if (await attempt(name)) return name
  }
  // Everything looked taken: look for stale leases among them.
  for (let n = names.first; n <= names.last; n++) {
    const name = names.nameOf(n)
    if (taken.has(name) && (await attempt(name))) return name
  }
  return undefined
}

/**
 * Hands a lease to another owner in place (write a new file, rename it over the lease): the file
 * never goes missing, so no other create can take the address meanwhile. False when `from` does
 * not hold it.
 */
export const transfer = async (leaseDir: string, ip: string, from: LeaseOwner, to: LeaseOwner): Promise<boolean> => {
  const file = NodePath.join(leaseDir, ip)
  const current = await readOwner(file)
  if (current === undefined || current.dataDir !== from.dataDir || current.sandboxId !== from.sandboxId) {
    return current !== undefined && current.dataDir === to.dataDir && current.sandboxId === to.sandboxId
  }
  const temp = `${file}.transfer-${randomBytes(6).toString("hex")}`
  // On an adopt's path: written synchronously, as the driver's records (State.ts).
  FsSync.writeFileSync(temp, ownerText(to))
  FsSync.renameSync(temp, file)
  return true
}

/** Gives the address back if (and only if) the lease is still ours. */
export const release = async (leaseDir: string, ip: string, owner: LeaseOwner): Promise<void> => {
  const file = NodePath.join(leaseDir, ip)
  const current = await readOwner(file)
  if (current !== undefined && current.dataDir === owner.dataDir && current.sandboxId === owner.sandboxId) {
    await Fs.unlink(file).catch(() => undefined)
  }
}

export const interfaceExists = (name: string) => exists(`/sys/class/net/${name}`)

/**
 * The sandbox's MAC, derived from its address (locally administered, `02:53:` + the IPv4 bytes).
 * A random one broke the host's reach: the host's neighbour entry of an address stays
 * REACHABLE for a while after its sandbox goes, and a new sandbox on the same address would
 * not be found (it never speaks first: the firewall gives it no reason to ARP for the host).
 */
export const macOf = (ip: string): string =>
  ["02", "53", ...ip.split(".").map((part) => Number(part).toString(16).padStart(2, "0"))].join(":")

/*
 * The veth pair is made by the spawner (`Spawner.veth`, rtnetlink from `native/svc-spawner.c`),
 * in this order, what two `ip -batch` scripts did before:
 *   host:   link add sv<hex> master <bridge> type veth peer name eth0 address <macOf(ip)>
 *             netns <the init's>  (the inner end born in the sandbox's namespace: moving an
 *             existing interface into a namespace cost ~40 ms, creating it there ~5 ms)
 *           link set dev sv<hex> type bridge_slave isolated on  (isolated bridge ports talk only
 *             to the bridge itself, the host, never to each other)
 *           link set sv<hex> up
 *           neigh replace <ip> lladdr <macOf(ip)> dev <bridge> nud stale  (whatever the host
 *             remembers of this address: a sandbox made before MACs were derived)
 *   inside: link set eth0 addrgenmode none  (no IPv6 on eth0: without a generated address, set
 *             before the link comes up, the sandbox has no IPv6 source on the bridge, so the
 *             host's link-local addresses are out of reach even before the firewall, which
 *             drops them too)
 *           addr add <ip>/<prefix> dev eth0; link set eth0 up; link set lo up
 *           route add default via <gateway> dev eth0  (only with egress: the firewall then
 *             redirects every TCP connection and DNS query to the host's egress proxy and drops
 *             the rest; without egress there is no route out)
 */
