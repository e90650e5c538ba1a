import { describe, expect, it } from "@effect/vitest"
import { DateTime, Schema } from "effect"
import * as Ids from "../src/Ids.ts"
import * as S from "../src/Sandbox.ts"
import { ok, refusedAt } from "./helpers.ts"

const record: S.Sandbox = {
  id: Ids.makeSandboxId(),
  name: "build-box",
  orgId: Ids.makeOrgId(),
  templateId: Ids.BASE_TEMPLATE_ID,
  hostId: null,
  parentId: null,
  state: "pending",
  type: "persistent",
  region: "local",
  datacenter: null,
  agent_ready: false,
  runtime_ready: false,
  runtime_reason: null,
  cpu: 1,
  ramMb: 512,
  diskGb: 1,
  vsockCid: null,
  internalIp: null,
  exposedPorts: [8080],
  volume_attachments: [{
    volume_id: Ids.makeVolumeId(),
    type: "local",
    driver: "local",
    mount_path: "/data",
    subpath: "",
    mode: "rw",
    attachment_id: Ids.makeAttachmentId(),
    device_path: null
  }],
  metadata: { team: "infra", n: 1 },
  errorMessage: null,
  network: { allow_out: ["example.com"], deny_out: [] },
  secrets: [],
  createdAt: DateTime.makeUnsafe(Date.UTC(2026, 10, 22, 1, 2, 3, 456)),
  startedAt: null,
  stoppedAt: null,
  deletedAt: null,
  timeout_s: 600,
  idle_timeout_s: 60,
  on_timeout: "stop",
  auto_delete_s: null,
  auto_resume: true,
  expiresAt: null,
  lastActivityAt: null,
  stop_reason: null
}

describe("Sandbox record", () => {
  it("encodes with the contract's exact field names and ISO timestamps", () => {
    const json = Schema.encodeSync(S.Sandbox)(record)
    expect(Object.keys(json)).toEqual([
      "id",
      "name",
      "orgId",
      "templateId",
      "hostId",
      "parentId",
      "state",
      "type",
      "region",
      "datacenter",
      "agent_ready",
      "runtime_ready",
      "runtime_reason",
      "cpu",
      "ramMb",
      "diskGb",
      "vsockCid",
      "internalIp",
      "exposedPorts",
      "volume_attachments",
      "metadata",
      "errorMessage",
      "network",
      "secrets",
      "createdAt",
      "startedAt",
      "stoppedAt",
      "deletedAt",
      // Lifecycle (docs/contract.md#lifecycle-timeouts-idleness-resume).
      "timeout_s",
      "idle_timeout_s",
      "on_timeout",
      "auto_delete_s",
      "auto_resume",
      "expiresAt",
      "lastActivityAt",
      "stop_reason"
    ])
    expect(json.createdAt).toBe("2026-11-22T01:02:03.456Z")
    expect(json.startedAt).toBeNull()
    expect(Object.keys(json.volume_attachments[0]!)).toEqual([
      "volume_id",
      "type",
      "driver",
      "mount_path",
      "subpath",
      "mode",
      // Added by this contract (docs/contract.md#volumes).
      "attachment_id",
      "device_path"
    ])
    expect(Schema.decodeUnknownSync(S.Sandbox)(JSON.parse(JSON.stringify(json)))).toEqual(record)
  })

  it("knows the contract's states", () => {
    expect(S.SANDBOX_STATES).toEqual([
      "pending",
      "starting",
      "running",
      "stopping",
      "stopped",
      "deleting",
      "deleted",
      "error"
    ])
  })
})

describe("CreateSandboxRequest", () => {
  it("applies the contract's defaults", () => {
    expect(ok(S.CreateSandboxRequest, {})).toEqual({
      template: "base",
      parent_id: null,
      env: {},
      cpu: 1,
      ram_mb: 512,
      disk_gb: 1,
      metadata: {},
      type: "persistent",
      region: null,
      volumes: [],
      exposed_ports: [],
      secrets: [],
      network: { allow_out: [], deny_out: [] },
      timeout_s: null,
      idle_timeout_s: null,
      on_timeout: "stop",
      auto_delete_s: null,
      auto_resume: false
    })
  })

  it("accepts a full request and ignores unknown fields", () => {
    const parent = Ids.makeSandboxId()
    const vol = Ids.makeVolumeId()
    const sec = Ids.makeSecretId()
    const r = ok(S.CreateSandboxRequest, {
      name: "child one",
      template: "python-3.12",
      parent_id: parent,
      env: { SVC_API_KEY: "svc_live_x", _X1: "" },
      cpu: 16,
      ram_mb: 65536,
      disk_gb: 1024,
      metadata: { nested: { list: [1, "two", null, true] } },
      type: "ephemeral",
      region: "eu-west-1",
      volumes: [{ volume_id: vol, mount_path: "/data", subpath: "a/b", mode: "ro" }, {
        volume_id: vol,
        mount_path: "/other"
      }],
      exposed_ports: [1, 65535],
      secrets: [sec],
      timeout_s: 3600,
      surprise: true
    })
    expect(r.parent_id).toBe(parent)
    expect(r.volumes[1]).toEqual({ volume_id: vol, mount_path: "/other", subpath: "", mode: "rw" })
    expect("surprise" in r).toBe(false)
  })

  it("refuses out-of-range and malformed fields, naming each", () => {
    expect(refusedAt(S.CreateSandboxRequest, { cpu: 0 })).toEqual(["cpu"])
    expect(refusedAt(S.CreateSandboxRequest, { cpu: 17 })).toEqual(["cpu"])
    expect(refusedAt(S.CreateSandboxRequest, { cpu: 1.5 })).toEqual(["cpu"])
    expect(refusedAt(S.CreateSandboxRequest, { cpu: "1" })).toEqual(["cpu"])
    expect(refusedAt(S.CreateSandboxRequest, { ram_mb: 63 })).toEqual(["ram_mb"])
    expect(refusedAt(S.CreateSandboxRequest, { ram_mb: 65537 })).toEqual(["ram_mb"])
    expect(refusedAt(S.CreateSandboxRequest, { disk_gb: 0 })).toEqual(["disk_gb"])
    expect(refusedAt(S.CreateSandboxRequest, { disk_gb: 1025 })).toEqual(["disk_gb"])
    expect(refusedAt(S.CreateSandboxRequest, { type: "temporary" })).toEqual(["type"])
    expect(refusedAt(S.CreateSandboxRequest, { parent_id: "sbx_nope" })).toEqual(["parent_id"])
    expect(refusedAt(S.CreateSandboxRequest, { parent_id: Ids.makeOrgId() })).toEqual(["parent_id"])
    expect(refusedAt(S.CreateSandboxRequest, { timeout_s: 0 })).toEqual(["timeout_s"])
    expect(refusedAt(S.CreateSandboxRequest, { region: "eu west" })).toEqual(["region"])
    expect(refusedAt(S.CreateSandboxRequest, { name: "" })).toEqual(["name"])
    expect(refusedAt(S.CreateSandboxRequest, { name: "   " })).toEqual(["name"])
    expect(refusedAt(S.CreateSandboxRequest, { name: "a\u0000b" })).toEqual(["name"])
    expect(refusedAt(S.CreateSandboxRequest, { name: "x".repeat(121) })).toEqual(["name"])
    expect(ok(S.CreateSandboxRequest, { name: "😀".repeat(120) }).name).toHaveLength(240)
    expect(refusedAt(S.CreateSandboxRequest, { template: "" })).toEqual(["template"])
    expect(refusedAt(S.CreateSandboxRequest, [])).toEqual([""])
    expect(refusedAt(S.CreateSandboxRequest, null)).toEqual([""])
    expect(refusedAt(S.CreateSandboxRequest, "{}")).toEqual([""])
  })

  it("limits metadata to 16 KiB of JSON", () => {
    const fits = { k: "x".repeat(16 * 1024 - 10) } // {"k":"..."} is 8 bytes of framing
    expect(ok(S.CreateSandboxRequest, { metadata: fits }).metadata).toEqual(fits)
    expect(refusedAt(S.CreateSandboxRequest, { metadata: { k: "x".repeat(16 * 1024) } })).toEqual(["metadata"])
    expect(refusedAt(S.CreateSandboxRequest, { metadata: [1] })).toEqual(["metadata"])
    expect(refusedAt(S.CreateSandboxRequest, { metadata: "x" })).toEqual(["metadata"])
  })

  it("checks env: at most 128 variables, names, NUL, sizes", () => {
    const many = Object.fromEntries(Array.from({ length: 128 }, (_, i) => [`V${i}`, "x"]))
    expect(Object.keys(ok(S.CreateSandboxRequest, { env: many }).env)).toHaveLength(128)
    expect(refusedAt(S.CreateSandboxRequest, { env: { ...many, V128: "x" } })).toEqual(["env"])
    expect(refusedAt(S.CreateSandboxRequest, { env: { "1X": "x" } })).toEqual(["env.1X"])
    expect(refusedAt(S.CreateSandboxRequest, { env: { "A-B": "x" } })).toEqual(["env.A-B"])
    expect(refusedAt(S.CreateSandboxRequest, { env: { "": "x" } })).toEqual(["env."])
    expect(refusedAt(S.CreateSandboxRequest, { env: { "A=B": "x" } })).toEqual(["env.A=B"])
    expect(refusedAt(S.CreateSandboxRequest, { env: { A: "a\u0000b" } })).toEqual(["env.A"])
    expect(refusedAt(S.CreateSandboxRequest, { env: { A: "x".repeat(32 * 1024 + 1) } })).toEqual(["env.A"])
    expect(refusedAt(S.CreateSandboxRequest, { env: { A: 1 } })).toEqual(["env.A"])
    const big = Object.fromEntries(Array.from({ length: 9 }, (_, i) => [`V${i}`, "x".repeat(30 * 1024)]))
    expect(refusedAt(S.CreateSandboxRequest, { env: big })).toEqual(["env"])
  })

  it("keeps __proto__ as plain data", () => {
    const r = ok(
      S.CreateSandboxRequest,
      JSON.parse("{\"env\":{\"__proto__\":\"x\"},\"metadata\":{\"__proto__\":{\"polluted\":1}}}")
    )
    expect(Object.getPrototypeOf(r.env)).toBe(Object.prototype)
    expect(Object.keys(r.metadata)).toEqual(["__proto__"])
    expect(({} as Record<string, unknown>)["polluted"]).toBeUndefined()
  })

  it("checks ports, volumes and secrets", () => {
    expect(refusedAt(S.CreateSandboxRequest, { exposed_ports: [0] })).toEqual(["exposed_ports.0"])
    expect(refusedAt(S.CreateSandboxRequest, { exposed_ports: [65536] })).toEqual(["exposed_ports.0"])
    expect(refusedAt(S.CreateSandboxRequest, { exposed_ports: [80, 80] })).toEqual(["exposed_ports.1"])
    expect(refusedAt(S.CreateSandboxRequest, { exposed_ports: Array.from({ length: 17 }, (_, i) => i + 1) }))
      .toEqual(["exposed_ports"])
    const vol = Ids.makeVolumeId()
    expect(refusedAt(S.CreateSandboxRequest, { volumes: [{ volume_id: vol, mount_path: "data" }] })).toEqual([
      "volumes.0.mount_path"
    ])
    expect(refusedAt(S.CreateSandboxRequest, { volumes: [{ volume_id: vol, mount_path: "/" }] })).toEqual([
      "volumes.0.mount_path"
    ])
    expect(refusedAt(S.CreateSandboxRequest, { volumes: [{ volume_id: vol, mount_path: "/a/../etc" }] }))
      .toEqual(["volumes.0.mount_path"])
    expect(refusedAt(S.CreateSandboxRequest, { volumes: [{ volume_id: vol, mount_path: "/a", subpath: "../x" }] }))
      .toEqual(["volumes.0.subpath"])
    expect(refusedAt(S.CreateSandboxRequest, { volumes: [{ volume_id: vol, mount_path: "/a", subpath: "/x" }] }))
      .toEqual(["volumes.0.subpath"])
    expect(refusedAt(S.CreateSandboxRequest, { volumes: [{ volume_id: vol, mount_path: "/a", mode: "rwx" }] }))
      .toEqual(["volumes.0.mode"])
    expect(refusedAt(S.CreateSandboxRequest, { volumes: [{ volume_id: "vol_1", mount_path: "/a" }] }))
      .toEqual(["volumes.0.volume_id"])
    expect(refusedAt(S.CreateSandboxRequest, {
      volumes: [{ volume_id: vol, mount_path: "/a" }, { volume_id: Ids.makeVolumeId(), mount_path: "/a/" }]
    })).toEqual(["volumes.1"])
    const sec = Ids.makeSecretId()
    expect(refusedAt(S.CreateSandboxRequest, { secrets: [sec, sec] })).toEqual(["secrets.1"])
    expect(refusedAt(S.CreateSandboxRequest, { secrets: ["sec_x"] })).toEqual(["secrets.0"])
  })

  it("checks network rules: CIDRs, addresses, domains, wildcards in front only; stores them lowercase", () => {
    expect(
      ok(S.CreateSandboxRequest, { network: { allow_out: ["Example.COM", "*.example.org", "203.0.113.0/24"] } })
        .network
    ).toEqual({ allow_out: ["example.com", "*.example.org", "203.0.113.0/24"], deny_out: [] })
    expect(ok(S.CreateSandboxRequest, { network: { deny_out: ["2001:db8::/32", "198.51.100.7"] } }).network)
      .toEqual({ allow_out: [], deny_out: ["2001:db8::/32", "198.51.100.7"] })
    expect(refusedAt(S.CreateSandboxRequest, { network: { allow_out: ["ok.com", "a.*.com"] } }))
      .toEqual(["network.allow_out.1"])
    expect(refusedAt(S.CreateSandboxRequest, { network: { deny_out: ["10.0.0.0/33"] } })).toEqual([
      "network.deny_out.0"
    ])
    expect(refusedAt(S.CreateSandboxRequest, { network: { deny_out: ["localhost"] } })).toEqual(["network.deny_out.0"])
    expect(refusedAt(S.CreateSandboxRequest, { network: { allow_out: [""] } })).toEqual(["network.allow_out.0"])
    expect(refusedAt(S.CreateSandboxRequest, { network: { allow_out: Array.from({ length: 101 }, () => "a.com") } }))
      .toEqual(["network.allow_out"])
    expect(refusedAt(S.CreateSandboxRequest, { network: { allow_out: "example.com" } })).toEqual(["network.allow_out"])
  })
})

describe("ListSandboxesQuery", () => {
  it("parses paginated and a state list", () => {
    expect(ok(S.ListSandboxesQuery, {})).toEqual({ limit: 50, offset: 0, paginated: true })
    expect(ok(S.ListSandboxesQuery, { paginated: "false", state: "running,stopped,running" })).toEqual({
      limit: 50,
      offset: 0,
      paginated: false,
      state: ["running", "stopped"]
    })
    expect(refusedAt(S.ListSandboxesQuery, { paginated: "yes" })).toEqual(["paginated"])
    expect(refusedAt(S.ListSandboxesQuery, { state: "sleeping" })).toEqual(["state.0"])
    expect(refusedAt(S.ListSandboxesQuery, { state: "" })).toEqual(["state.0"])
    expect(refusedAt(S.ListSandboxesQuery, { state: "running," })).toEqual(["state.1"])
  })
})

describe("Exec", () => {
  it("accepts argv and applies the default timeout", () => {
    expect(ok(S.ExecRequest, { cmd: ["echo", "hi"] })).toEqual({ cmd: ["echo", "hi"], timeout_ms: 60_000 })
    expect(ok(S.ExecRequest, { cmd: ["sh", "-c", ""], cwd: "/tmp", env: { A: "1" }, stdin: "x", timeout_ms: 600_000 }))
      .toEqual({ cmd: ["sh", "-c", ""], cwd: "/tmp", env: { A: "1" }, stdin: "x", timeout_ms: 600_000 })
  })

  it("refuses empty, blank-program, NUL and out-of-range requests", () => {
    expect(refusedAt(S.ExecRequest, {})).toEqual(["cmd"])
    expect(refusedAt(S.ExecRequest, { cmd: [] })).toEqual(["cmd"])
    expect(refusedAt(S.ExecRequest, { cmd: "ls" })).toEqual(["cmd"])
    expect(refusedAt(S.ExecRequest, { cmd: [""] })).toEqual(["cmd.0"])
    expect(refusedAt(S.ExecRequest, { cmd: ["ls", "a\u0000b"] })).toEqual(["cmd.1"])
    expect(refusedAt(S.ExecRequest, { cmd: ["ls", 1] })).toEqual(["cmd.1"])
    expect(refusedAt(S.ExecRequest, { cmd: ["ls"], timeout_ms: 0 })).toEqual(["timeout_ms"])
    expect(refusedAt(S.ExecRequest, { cmd: ["ls"], timeout_ms: 600_001 })).toEqual(["timeout_ms"])
    expect(refusedAt(S.ExecRequest, { cmd: ["ls"], cwd: "tmp" })).toEqual(["cwd"])
    expect(refusedAt(S.ExecRequest, { cmd: ["ls"], env: { "B-1": "x" } })).toEqual(["env.B-1"])
  })

  it("encodes the result", () => {
    const r = { exit_code: 0, stdout: "hi\n", stderr: "", duration_ms: 12, truncated: false }
    expect(Schema.encodeSync(S.ExecResult)(r)).toEqual(r)
  })
})

describe("SandboxFilePath (every files route's path)", () => {
  it("refuses /proc and /sys however spelt; keeps names that only start like them", () => {
    const query = Schema.Struct({ path: S.SandboxFilePath })
    for (
      const path of ["/proc", "/proc/", "//proc", "/./proc/1/environ", "/.//proc//self/environ", "/sys", "/sys/kernel"]
    ) {
      expect(refusedAt(query, { path }), path).toEqual(["path"])
    }
    // `..` is refused before (AbsolutePath), so `/x/../proc` never names anything.
    expect(refusedAt(query, { path: "/x/../proc/1/environ" })).toEqual(["path"])
    for (const path of ["/", "/processes", "/system/x", "/srv/proc", "/tmp/sys", "/PROC/1"]) {
      expect(ok(query, { path }), path).toEqual({ path })
    }
  })
})
