/**
 * A fake public host for egress tests (the agent's, the API's, bench/egress.ts): HTTP :80, HTTPS
 * :443 and UDP :9999 that counts datagrams (`fake-public-host.mjs`), in a network namespace of its
 * own on a /30 of 198.51.100.0/24, its names in a hosts file and its CA in an upstream CA file, and
 * the agent options that let a sandbox reach it through the egress proxy on a bridge of its own.
 * Everything is removed when the scope closes.
 */
import { Effect } from "effect"
import { execFileSync, spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import * as FsSync from "node:fs"
import { fileURLToPath } from "node:url"

/** The fake hosts' documentation range, allowed to sandboxes in these tests. */
export const FAKE_RANGE = "198.51.100.0/24"
/**
 * Test files run side by side, each with a fake host of its own: each takes a /30 of the upper
 * half of the range (the driver's firewall test uses the lower half), claimed with an atomic
 * mkdir so two at once never share addresses or routes.
 */
const SLOTS_DIR = "/tmp/svc-fake-public-hosts"
const claimSlot = Effect.acquireRelease(
  Effect.sync(() => {
    FsSync.mkdirSync(SLOTS_DIR, { recursive: true })
    for (let attempt = 0; attempt < 200; attempt++) {
      const k = 32 + (randomBytes(1)[0]! & 31)
      try {
        FsSync.mkdirSync(`${SLOTS_DIR}/${k}`)
        return k
      } catch {
        // Taken (or left by a killed run: another slot will do).
      }
    }
    throw new Error(`no free fake host slot in ${SLOTS_DIR}`)
  }),
  (k) => Effect.sync(() => FsSync.rmSync(`${SLOTS_DIR}/${k}`, { recursive: true, force: true }))
)
/** The fake public host's names. */
export const API = "api.egress-fake.test"
export const OTHER = "other.egress-fake.test"

export const host = (command: string, args: ReadonlyArray<string>) =>
  execFileSync(command, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] })
const quiet = (command: string, args: ReadonlyArray<string>) => {
  try {
    host(command, args)
  } catch {
    // Already gone.
  }
}

/**
 * The fake public host alone (for the API's tests too): its namespace, servers and files, and
 * the agent options that let a sandbox reach it through the egress proxy on a bridge of its own.
 */
export const fakePublicHost = Effect.gen(function*() {
  const tag = randomBytes(3).toString("hex")
  const slot = yield* claimSlot
  const address = `198.51.100.${4 * slot + 2}`
  const gatewayAddress = `198.51.100.${4 * slot + 1}`
  const dir = FsSync.mkdtempSync("/tmp/svc-egress-test-")
  // The fake public host's CA and certificate (for both names).
  const ssl = (args: ReadonlyArray<string>) => host("openssl", [...args])
  ssl([
    "req",
    "-x509",
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:P-256",
    "-nodes",
    "-keyout",
    `${dir}/fake-ca.key`,
    "-out",
    `${dir}/fake-ca.pem`,
    "-days",
    "2",
    "-subj",
    "/CN=fake public CA",
    "-addext",
    "basicConstraints=critical,CA:TRUE"
  ])
  ssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", `${dir}/fake.key`])
  ssl([
    "req",
    "-new",
    "-key",
    `${dir}/fake.key`,
    "-subj",
    `/CN=${API}`,
    "-addext",
    `subjectAltName=DNS:${API},DNS:${OTHER}`,
    "-CA",
    `${dir}/fake-ca.pem`,
    "-CAkey",
    `${dir}/fake-ca.key`,
    "-days",
    "2",
    "-out",
    `${dir}/fake.pem`
  ])
  FsSync.writeFileSync(`${dir}/hosts`, `# the fake public host\n${address} ${API} ${OTHER}\n`)

  // Its network namespace, joined to the host by a veth pair.
  const ns = `sveg${tag}`
  const outer = `vegh${tag}`
  yield* Effect.acquireRelease(
    Effect.sync(() => {
      host("ip", ["netns", "add", ns])
      host("ip", ["link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", ns])
      host("ip", ["addr", "add", `${gatewayAddress}/30`, "dev", outer])
      host("ip", ["link", "set", outer, "up"])
      host("ip", ["-n", ns, "addr", "add", `${address}/30`, "dev", "eth0"])
      host("ip", ["-n", ns, "link", "set", "eth0", "up"])
      host("ip", ["-n", ns, "link", "set", "lo", "up"])
    }),
    () =>
      Effect.sync(() => {
        quiet("ip", ["link", "del", outer])
        quiet("ip", ["netns", "del", ns])
      })
  )
  const script = fileURLToPath(new URL("./fake-public-host.mjs", import.meta.url))
  yield* Effect.acquireRelease(
    Effect.callback<ReturnType<typeof spawn>>((resume) => {
      const child = spawn("ip", [
        "netns",
        "exec",
        ns,
        process.execPath,
        script,
        address,
        `${dir}/fake.pem`,
        `${dir}/fake.key`
      ], {
        stdio: ["pipe", "pipe", "inherit"]
      })
      child.stdout!.on("data", (chunk: Buffer) => {
        if (chunk.toString().includes("ready")) resume(Effect.succeed(child))
      })
    }),
    (child) => Effect.sync(() => child.kill("SIGKILL"))
  )

  const bridge = `sveb${tag}`
  const subnet = `10.216.${randomBytes(1)[0]}.0/24`
  yield* Effect.addFinalizer(() =>
    Effect.sync(() => {
      quiet("ip", ["link", "del", bridge])
      quiet("nft", ["delete", "table", "inet", `svc_${bridge}`])
      FsSync.rmSync(dir, { recursive: true, force: true })
    })
  )
  return {
    dir,
    /** The fake host's address (its names resolve to it through the hosts file). */
    address,
    agentOptions: {
      bridge,
      subnet,
      egress: {
        allowedSubnets: [{ address: "198.51.100.0", prefix: 24, family: "ipv4" as const }],
        hostsFile: `${dir}/hosts`,
        upstreamCaFile: `${dir}/fake-ca.pem`,
        tcpPort: 20_000 + Math.floor(Math.random() * 20_000),
        dnsPort: 40_000 + Math.floor(Math.random() * 20_000)
      }
    }
  }
})
