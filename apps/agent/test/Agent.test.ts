import { assert, layer } from "@effect/vitest"
import { Nats } from "@svc/bus/Nats"
import { WORKERS_BUCKET } from "@svc/bus/Workers"
import { makeSandboxId } from "@svc/domain/Ids"
import { type AgentCommand, HostRecord, HOSTS_BUCKET_SPEC } from "@svc/host-protocol/Protocol"
import { SandboxSpec } from "@svc/host/Driver"
import { processesOfHost } from "@svc/testing/HostProcesses"
import { Effect, Schema } from "effect"
import { randomBytes } from "node:crypto"
import * as FsSync from "node:fs"
import * as Http from "node:http"
import * as NodePath from "node:path"
import { Journal, JournalEntry } from "../src/Journal.ts"
import {
  createCommand,
  eventually,
  http,
  lifecycleCommand,
  makeHost,
  publishCommand,
  publishRaw,
  Reports,
  type RunningAgent,
  startAgent,
  testLayer
} from "../testing/Agent.ts"

const decodeHostRecord = Schema.decodeUnknownSync(Schema.fromJsonString(HostRecord))

/** Creates a sandbox through a command and waits for its `running` report. */
const createRunning = (agent: RunningAgent, overrides: Parameters<typeof createCommand>[1] = {}) =>
  Effect.gen(function*() {
    const reports = yield* Reports
    const sandboxId = makeSandboxId()
    yield* publishCommand(agent.host.hostId, createCommand(sandboxId, overrides))
    const report = yield* reports.waitFor(sandboxId, (r) => r.status !== "running" || r.agentReady === true)
    assert.strictEqual(report.status, "running", JSON.stringify(report))
    return { sandboxId, report }
  })

const destroyAndWait = (agent: RunningAgent, sandboxId: string) =>
  Effect.gen(function*() {
    const reports = yield* Reports
    yield* publishCommand(agent.host.hostId, lifecycleCommand("destroy", sandboxId))
    yield* reports.waitFor(sandboxId, (r) => r.status === "destroyed")
  })

const exec = (agent: RunningAgent, sandboxId: string, body: unknown, token?: string | null) =>
  http(agent, `/sandboxes/${sandboxId}/exec`, {
    method: "POST",
    body: JSON.stringify(body),
    headers: { "content-type": "application/json" },
    ...(token !== undefined ? { token } : {})
  })

/** A raw request with a declared Content-Length and a partial body: the answer comes first. */
const rawRequest = (
  agent: RunningAgent,
  options: {
    method: string
    path: string
    headers: Record<string, string | number>
    body?: Uint8Array
    chunks?: number
  }
) =>
  Effect.callback<{ status: number; body: string }>((resume) => {
    const url = new URL(agent.dataPlane.endpoint)
    const request = Http.request(
      {
        host: url.hostname,
        port: Number(url.port),
        method: options.method,
        path: options.path,
        headers: options.headers
      },
      (response) => {
        let body = ""
        response.on("data", (chunk: Buffer) => (body += chunk.toString("utf8")))
        response.on("end", () => resume(Effect.succeed({ status: response.statusCode ?? 0, body })))
      }
    )
    request.on("error", () => undefined)
    if (options.body !== undefined) {
      let sent = 0
      const write = () => {
        while (sent < (options.chunks ?? 1)) {
          sent++
          if (!request.write(options.body!)) return void request.once("drain", write)
        }
        request.end()
      }
      write()
    } else request.end()
  })

layer(testLayer, { excludeTestServices: true, timeout: 120_000 })("host agent", (it) => {
  it.effect("a create command runs the sandbox and reports it to the actor's mailbox; one sandbox's commands apply in order", () =>
    Effect.gen(function*() {
      const host = yield* makeHost
      const agent = yield* startAgent(host)
      const reports = yield* Reports
      const { sandboxId, report } = yield* createRunning(agent)
      assert.strictEqual(report.hostId, host.hostId)
      assert.strictEqual(report.via, "cold-boot")
      assert.isTrue(report.agentReady)
      assert.match(report.internalIp ?? "", /^\d+\.\d+\.\d+\.\d+$/)
      const listed = yield* agent.driver.list
      assert.deepStrictEqual(listed.map((r) => [r.sandboxId, r.status, r.internalIp]), [[
        sandboxId,
        "running",
        report.internalIp
      ]])

      // Sent to the sandbox actor: its mailbox subject naming this host, and a msgID derived from the command's.
      const received = (yield* reports.all).find((r) => r.report.sandboxId === sandboxId)!
      assert.match(received.subject, new RegExp(`\\.actor\\.sandbox\\.\\d+\\.${sandboxId}\\.host\\.${host.hostId}$`))
      assert.match(received.msgId ?? "", new RegExp(`^report:${host.hostId}:cmd-`))

      // A repeated create (another delivery of the same intent) reports the same sandbox again.
      yield* publishCommand(host.hostId, createCommand(sandboxId))
      const again = yield* reports.waitFor(sandboxId, () => true, 1)
      assert.strictEqual(again.status, "running")
      assert.strictEqual(again.internalIp, report.internalIp)
      assert.strictEqual((yield* agent.driver.list).length, 1)

      // stop, start, stop, destroy published at once: applied and reported in that order.
      for (const tag of ["stop", "start", "stop", "destroy"] as const) {
        yield* publishCommand(host.hostId, lifecycleCommand(tag, sandboxId))
      }
      yield* reports.waitFor(sandboxId, (r) => r.status === "destroyed")
      const statuses = (yield* reports.of(sandboxId)).map((r) => r.status)
      assert.deepStrictEqual(statuses, ["running", "running", "stopped", "running", "stopped", "destroyed"])
      const restarted = (yield* reports.of(sandboxId))[3]!
      assert.strictEqual(restarted.via, "restore")
      assert.strictEqual(restarted.internalIp, report.internalIp)
      const times = (yield* reports.of(sandboxId)).map((r) => r.at)
      assert.deepStrictEqual(times, [...times].sort((a, b) => a - b))
      assert.deepStrictEqual(yield* agent.driver.list, [])
      assert.deepStrictEqual(processesOfHost(host.hostId), [])
      const journal = yield* Journal.make(NodePath.join(host.dataDir, "agent", "journal"))
      assert.deepStrictEqual(yield* journal.list, [])
    }))

  it.effect("refuses what it cannot apply: failed reports for bad requests and envs that do not open, foreign messages terminated without blocking", () =>
    Effect.gen(function*() {
      const host = yield* makeHost
      const agent = yield* startAgent(host)
      const reports = yield* Reports
      const nats = yield* Nats

      yield* publishRaw(host.hostId, "create", "not json")
      yield* publishRaw(host.hostId, "create", JSON.stringify(lifecycleCommand("destroy", makeSandboxId())))
      yield* publishRaw(host.hostId, "create", JSON.stringify({ ...createCommand("x"), sandboxId: "a.b" }))
      // A command from before the env was sealed (env in the clear): not a command any more.
      const { sealedEnv: _, ...legacy } =
        (createCommand(makeSandboxId()) as Extract<AgentCommand, { _tag: "create" }>).resources
      yield* publishRaw(
        host.hostId,
        "create",
        JSON.stringify({ ...createCommand(makeSandboxId()), resources: { ...legacy, env: { A: "b" } } })
      )

      // An env sealed for another sandbox does not open for this one; nor does a plaintext one.
      const copiedEnv = makeSandboxId()
      const foreign = createCommand(makeSandboxId(), { env: { SECRET: "copied-secret-value" } }) as Extract<
        AgentCommand,
        { _tag: "create" }
      >
      yield* publishCommand(host.hostId, { ...foreign, sandboxId: copiedEnv })
      const plainEnv = makeSandboxId()
      const plain = createCommand(plainEnv) as Extract<AgentCommand, { _tag: "create" }>
      yield* publishCommand(host.hostId, {
        ...plain,
        resources: { ...plain.resources, sealedEnv: JSON.stringify({ SECRET: "plain-secret-value" }) }
      })

      const badSpec = makeSandboxId()
      yield* publishCommand(host.hostId, createCommand(badSpec, { ramMb: 1 }))
      const badTemplate = makeSandboxId()
      yield* publishCommand(host.hostId, createCommand(badTemplate, { template: "no-such-template" }))
      const unknown = makeSandboxId()
      yield* publishCommand(host.hostId, lifecycleCommand("start", unknown))
      yield* publishCommand(host.hostId, lifecycleCommand("stop", unknown))
      yield* publishCommand(host.hostId, lifecycleCommand("destroy", unknown))

      for (const [id, reason] of [[copiedEnv, "rejected"], [plainEnv, "malformed"]] as const) {
        const refused = yield* reports.waitFor(id, () => true)
        assert.strictEqual(refused.status, "failed")
        assert.match(refused.errorMessage ?? "", new RegExp(`^the sandbox's env: the env does not open \\(${reason}: `))
        assert.notMatch(refused.errorMessage ?? "", /secret-value/)
      }
      assert.isFalse(FsSync.existsSync(NodePath.join(host.dataDir, "sandboxes", copiedEnv)))

      const spec = yield* reports.waitFor(badSpec, () => true)
      assert.strictEqual(spec.status, "failed")
      assert.match(spec.errorMessage ?? "", /invalid sandbox spec/)
      const template = yield* reports.waitFor(badTemplate, () => true)
      assert.strictEqual(template.status, "failed")
      assert.match(template.errorMessage ?? "", /template no-such-template/)
      yield* reports.waitFor(unknown, (r) => r.status === "destroyed")
      assert.deepStrictEqual(
        (yield* reports.of(unknown)).map((r) => [r.status, r.errorMessage]),
        [["failed", "no such sandbox on this host"], ["failed", "no such sandbox on this host"], [
          "destroyed",
          undefined
        ]]
      )

      // Later commands still flow, and nothing is left in the work queue: refusals were terminated.
      const { sandboxId } = yield* createRunning(agent)
      yield* destroyAndWait(agent, sandboxId)
      const info = yield* eventually(
        Effect.promise(() => nats.jsm.streams.info(nats.name("AGENT"))),
        (i) => i.state.messages === 0
      )
      assert.strictEqual(info.state.messages, 0)
      assert.deepStrictEqual(yield* agent.driver.list, [])
    }))

  it.effect("data plane: exec and files with the token; 401 without it or with a wrong one", () =>
    Effect.gen(function*() {
      const host = yield* makeHost
      const agent = yield* startAgent(host)
      const { sandboxId } = yield* createRunning(agent, { env: { GREETING: "hello" } })

      const echo = yield* exec(agent, sandboxId, {
        cmd: ["sh", "-c", "echo $GREETING $EXTRA; pwd; cat; echo oops >&2; exit 3"],
        cwd: "/tmp",
        env: { EXTRA: "world" },
        stdin: "from stdin\n"
      })
      assert.strictEqual(echo.status, 200)
      assert.strictEqual(echo.json.exit_code, 3)
      assert.strictEqual(echo.json.stdout, "hello world\n/tmp\nfrom stdin\n")
      assert.strictEqual(echo.json.stderr, "oops\n")
      assert.isNumber(echo.json.duration_ms)

      const slow = yield* exec(agent, sandboxId, { cmd: ["sleep", "30"], timeout_ms: 200 })
      assert.strictEqual(slow.status, 200)
      assert.notStrictEqual(slow.json.exit_code, 0)

      // Files: a binary round trip, a folder listing, a missing file.
      const bytes = randomBytes(70_000)
      const put = yield* http(
        agent,
        `/sandboxes/${sandboxId}/files?path=${encodeURIComponent("/root/data/blob.bin")}`,
        {
          method: "PUT",
          body: bytes
        }
      )
      assert.strictEqual(put.status, 204)
      const got = yield* http(agent, `/sandboxes/${sandboxId}/files?path=/root/data/blob.bin`)
      assert.strictEqual(got.status, 200)
      assert.strictEqual(got.contentType, "application/octet-stream")
      assert.isTrue(Buffer.from(got.bytes).equals(bytes))
      const folder = yield* http(agent, `/sandboxes/${sandboxId}/files?path=/root/data`)
      assert.strictEqual(folder.status, 200)
      assert.deepStrictEqual(folder.json.entries.map((e: any) => [e.name, e.type, e.size]), [[
        "blob.bin",
        "file",
        70_000
      ]])
      assert.match(folder.json.entries[0].mtime, /^\d{4}-\d\d-\d\dT/)
      const missing = yield* http(agent, `/sandboxes/${sandboxId}/files?path=/root/nothing`)
      assert.strictEqual(missing.status, 404)
      assert.strictEqual(missing.json.reason, "not_found")

      // The token: absent, wrong, wrong length, other scheme → 401 and nothing done.
      for (const token of [null, "wrong", agent.dataPlane.token.slice(0, -1) + "x", agent.dataPlane.token + "x"]) {
        const refused = yield* exec(agent, sandboxId, { cmd: ["touch", "/root/should-not-exist"] }, token)
        assert.strictEqual(refused.status, 401)
        assert.deepStrictEqual(refused.json, { error: "missing or wrong bearer token", reason: "unauthorized" })
      }
      const basic = yield* http(agent, `/sandboxes/${sandboxId}/files?path=/root/data/blob.bin`, {
        token: null,
        headers: { authorization: `Basic ${agent.dataPlane.token}` }
      })
      assert.strictEqual(basic.status, 401)
      const upload = yield* http(agent, `/sandboxes/${sandboxId}/files?path=/root/should-not-exist`, {
        method: "PUT",
        body: "x",
        token: "nope"
      })
      assert.strictEqual(upload.status, 401)
      const check = yield* exec(agent, sandboxId, { cmd: ["ls", "/root"] })
      assert.strictEqual(check.json.stdout, "data\n")

      yield* destroyAndWait(agent, sandboxId)
    }))

  it.effect("data plane refusals: bad requests, unknown and stopped sandboxes, body caps, path escapes read nothing of the host", () =>
    Effect.gen(function*() {
      const host = yield* makeHost
      const agent = yield* startAgent(host)
      const reports = yield* Reports
      const { sandboxId } = yield* createRunning(agent)

      const bad = [
        yield* http(agent, `/sandboxes/${sandboxId}/exec`, { method: "POST", body: "{not json" }),
        yield* exec(agent, sandboxId, { cmd: [] }),
        yield* exec(agent, sandboxId, { cmd: "ls" }),
        yield* exec(agent, sandboxId, { cmd: ["ls"], timeout_ms: -5 }),
        yield* exec(agent, sandboxId, { cmd: ["ls"], env: { "BAD NAME": "x" } }),
        yield* exec(agent, sandboxId, { cmd: ["ls"], cwd: "relative" }),
        yield* http(agent, `/sandboxes/${sandboxId}/files`),
        yield* http(agent, `/sandboxes/${sandboxId}/files?path=relative/path`),
        yield* http(agent, `/sandboxes/${sandboxId}/files?path=/a%00b`),
        yield* http(agent, `/sandboxes/bad%2Fid/files?path=/etc/passwd`),
        yield* http(agent, `/sandboxes/%E0%A4%A/exec`, { method: "POST", body: "{}" })
      ]
      for (const response of bad) {
        assert.strictEqual(response.status, 400, response.text)
        assert.strictEqual(response.json.reason, "invalid")
      }
      assert.strictEqual((yield* http(agent, `/sandboxes/${sandboxId}/exec`)).status, 405)
      assert.strictEqual(
        (yield* http(agent, `/sandboxes/${sandboxId}/files?path=/x`, { method: "DELETE" })).status,
        405
      )
      assert.strictEqual((yield* http(agent, `/other`)).status, 404)
      const unknown = yield* exec(agent, makeSandboxId(), { cmd: ["true"] })
      assert.strictEqual(unknown.status, 404)
      assert.strictEqual(unknown.json.reason, "not_found")

      // Body caps: exec JSON over 1 MiB. Uploads have none of their own (the sandbox's disk
      // bounds them): one streaming past the old 100 MiB cap is written whole.
      const huge = yield* exec(agent, sandboxId, { cmd: ["echo", "x".repeat(1024 * 1024)] })
      assert.strictEqual(huge.status, 413)
      assert.strictEqual(huge.json.reason, "too_large")
      const streamed = yield* rawRequest(agent, {
        method: "PUT",
        path: `/sandboxes/${sandboxId}/files?path=/root/big`,
        headers: { authorization: `Bearer ${agent.dataPlane.token}`, "transfer-encoding": "chunked" },
        body: new Uint8Array(1024 * 1024 + 1),
        chunks: 100
      })
      assert.strictEqual(streamed.status, 204)
      const ls = yield* exec(agent, sandboxId, { cmd: ["sh", "-c", "stat -c %s /root/big && rm /root/big"] })
      assert.strictEqual(ls.json.stdout, `${100 * (1024 * 1024 + 1)}\n`)

      // Escapes: `..` and links pointing out of the sandbox resolve inside it.
      const secret = `host-secret-${randomBytes(8).toString("hex")}`
      const secretFile = NodePath.join(host.dataDir, "secret.txt")
      FsSync.writeFileSync(secretFile, secret)
      const escapes = [
        `/../../../../../..${secretFile}`,
        `/root/../../..${secretFile}`
      ]
      yield* exec(agent, sandboxId, { cmd: ["ln", "-s", secretFile, "/root/link"] })
      yield* exec(agent, sandboxId, { cmd: ["ln", "-s", `../../../../..${host.dataDir}`, "/root/dirlink"] })
      yield* exec(agent, sandboxId, { cmd: ["ln", "-s", "/proc/1/root/etc", "/root/proclink"] })
      for (const path of [...escapes, "/root/link", "/root/dirlink/secret.txt", "/root/dirlink"]) {
        const response = yield* http(agent, `/sandboxes/${sandboxId}/files?path=${encodeURIComponent(path)}`)
        assert.strictEqual(response.status, 404, `${path}: ${response.text}`)
        assert.notInclude(response.text, secret)
      }
      // Writing through a link lands inside the sandbox, never on the host: a link to a host
      // file in a folder the sandbox also has writes the sandbox's file; one into a folder the
      // sandbox lacks fails.
      const hostTmpFile = `/tmp/svc-agent-test-${randomBytes(6).toString("hex")}`
      FsSync.writeFileSync(hostTmpFile, secret)
      yield* Effect.addFinalizer(() => Effect.sync(() => FsSync.rmSync(hostTmpFile, { force: true })))
      yield* exec(agent, sandboxId, { cmd: ["ln", "-s", hostTmpFile, "/root/tmplink"] })
      const through = yield* http(agent, `/sandboxes/${sandboxId}/files?path=/root/tmplink`, {
        method: "PUT",
        body: "overwritten"
      })
      assert.strictEqual(through.status, 204)
      assert.strictEqual((yield* http(agent, `/sandboxes/${sandboxId}/files?path=${hostTmpFile}`)).text, "overwritten")
      assert.strictEqual(FsSync.readFileSync(hostTmpFile, "utf8"), secret)
      const dangling = yield* http(agent, `/sandboxes/${sandboxId}/files?path=/root/link`, {
        method: "PUT",
        body: "overwritten"
      })
      assert.notStrictEqual(dangling.status, 204)
      assert.strictEqual(FsSync.readFileSync(secretFile, "utf8"), secret)
      const hostname = yield* http(agent, `/sandboxes/${sandboxId}/files?path=/root/proclink/hostname`)
      assert.notStrictEqual(hostname.text.trim(), FsSync.readFileSync("/etc/hostname", "utf8").trim())
      const shadow = yield* http(agent, `/sandboxes/${sandboxId}/files?path=${encodeURIComponent("/../etc/shadow")}`)
      assert.strictEqual(shadow.status, 200)
      assert.strictEqual(shadow.text, "root:*:19000:0:99999:7:::\nnobody:*:19000:0:99999:7:::\n")

      // A stopped sandbox: 409.
      yield* publishCommand(host.hostId, lifecycleCommand("stop", sandboxId))
      yield* reports.waitFor(sandboxId, (r) => r.status === "stopped")
      const stopped = yield* exec(agent, sandboxId, { cmd: ["true"] })
      assert.strictEqual(stopped.status, 409)
      assert.strictEqual(stopped.json.reason, "not_running")
      yield* destroyAndWait(agent, sandboxId)
    }))

  it.effect("two agents on one machine each consume only their own commands", () =>
    Effect.gen(function*() {
      const nats = yield* Nats
      const reports = yield* Reports
      const hostA = yield* makeHost
      const hostB = yield* makeHost
      const [a, b] = yield* Effect.all([startAgent(hostA), startAgent(hostB)], { concurrency: 2 })
      assert.notStrictEqual(a.dataPlane.endpoint, b.dataPlane.endpoint)

      const forA = [makeSandboxId(), makeSandboxId()]
      const forB = [makeSandboxId()]
      const absent = yield* makeHost
      const forNobody = makeSandboxId()
      for (const id of forA) yield* publishCommand(hostA.hostId, createCommand(id))
      for (const id of forB) yield* publishCommand(hostB.hostId, createCommand(id))
      yield* publishCommand(absent.hostId, createCommand(forNobody))

      for (const id of forA) assert.strictEqual((yield* reports.waitFor(id, () => true)).hostId, hostA.hostId)
      for (const id of forB) assert.strictEqual((yield* reports.waitFor(id, () => true)).hostId, hostB.hostId)
      assert.sameMembers((yield* a.driver.list).map((r) => r.sandboxId), forA)
      assert.sameMembers((yield* b.driver.list).map((r) => r.sandboxId), forB)
      const ips = [...(yield* a.driver.list), ...(yield* b.driver.list)].map((r) => r.internalIp)
      assert.strictEqual(new Set(ips).size, 3)

      // The other agent's sandbox is not reachable through this one's data plane.
      assert.strictEqual((yield* exec(a, forB[0]!, { cmd: ["true"] })).status, 404)
      assert.strictEqual((yield* exec(b, forB[0]!, { cmd: ["true"] })).status, 200)

      // The command for a host without an agent is still waiting in the work queue.
      const info = yield* eventually(
        Effect.promise(() => nats.jsm.streams.info(nats.name("AGENT"), { subjects_filter: ">" })),
        (i) => i.state.messages === 1
      )
      assert.deepStrictEqual(Object.keys(info.state.subjects ?? {}), [nats.subject("agent", absent.hostId, "create")])
      assert.deepStrictEqual(yield* reports.of(forNobody), [])

      for (const id of forA) yield* destroyAndWait(a, id)
      for (const id of forB) yield* destroyAndWait(b, id)
    }))

  it.effect("the host record is written at start, refreshed by heartbeats, and stops ageing no more once the agent stops", () =>
    Effect.gen(function*() {
      const nats = yield* Nats
      const host = yield* makeHost
      const agent = yield* startAgent(host, {
        heartbeatMs: 100,
        region: "eu-test",
        datacenter: "eu-test-1",
        capacity: { cpu: 3, ramMb: 2048, diskGb: 20 }
      })
      const kv = yield* Effect.promise(() => nats.kvm.open(nats.name(HOSTS_BUCKET_SPEC.name)))
      const read = Effect.promise(async () => {
        const entry = await kv.get(host.hostId)
        return entry === null
          ? undefined
          : { revision: entry.revision, record: decodeHostRecord(new TextDecoder().decode(entry.value)) }
      })
      const first = (yield* read)!
      assert.deepStrictEqual(
        { ...first.record, heartbeatAt: 0, startedAt: 0 },
        {
          hostId: host.hostId,
          region: "eu-test",
          datacenter: "eu-test-1",
          version: agent.config.version,
          // 3 cores offered 8 times over: cpu is a cap per sandbox; memory and disk as they are.
          capacity: { cpu: 24, ramMb: 2048, diskGb: 20 },
          cpuOvercommit: 8,
          endpoint: agent.dataPlane.endpoint,
          token: agent.dataPlane.token,
          heartbeatAt: 0,
          startedAt: 0,
          limits: { cgroup: "v1", memory: "enforced", cpu: "enforced", pids: "enforced", disk: "enforced" },
          // No image held yet: no layer pulled, no debian root made.
          layers: [],
          roots: []
        }
      )
      const later = yield* eventually(
        read,
        (r) => r !== undefined && r.record.heartbeatAt >= first.record.heartbeatAt + 150
      )
      assert.isAbove(later!.revision, first.revision)
      assert.strictEqual(later!.record.startedAt, first.record.startedAt)

      // Also listed among the workers, with the subjects it consumes.
      const workers = yield* Effect.promise(() => nats.kvm.open(nats.name(WORKERS_BUCKET)))
      const workerKeys = yield* Effect.promise(async () => {
        const out: Array<string> = []
        for await (const key of await workers.keys()) {
          const entry = await workers.get(key)
          if (entry !== null && entry.operation === "PUT") out.push(new TextDecoder().decode(entry.value))
        }
        return out.map((text) => JSON.parse(text) as { script_name: string; prefix: string })
      })
      assert.deepInclude(
        workerKeys.map((w) => [w.script_name, w.prefix]),
        ["agent", `${nats.prefix}.agent.${host.hostId}.`]
      )

      yield* agent.stop
      const atStop = (yield* read)!
      // Ten heartbeat periods later nothing has written the record again.
      yield* Effect.sleep("1 second")
      const after = (yield* read)!
      assert.strictEqual(after.revision, atStop.revision)
      assert.strictEqual(after.record.heartbeatAt, atStop.record.heartbeatAt)
    }))

  it.effect("a restarted agent reports what it finds and undoes what it had not finished", () =>
    Effect.gen(function*() {
      const host = yield* makeHost
      const reports = yield* Reports
      const first = yield* startAgent(host)
      const { sandboxId: keptRunning, report } = yield* createRunning(first)
      const { sandboxId: keptStopped } = yield* createRunning(first)
      yield* publishCommand(host.hostId, lifecycleCommand("stop", keptStopped))
      yield* reports.waitFor(keptStopped, (r) => r.status === "stopped")
      const { sandboxId: halfMade } = yield* createRunning(first)
      const { sandboxId: vanished } = yield* createRunning(first)
      yield* first.stop

      // As a killed agent would leave them: a sandbox removed behind its back, a sandbox nobody
      // ever confirmed (no journal entry), and a create in progress.
      const orphan = yield* Effect.gen(function*() {
        const second = yield* startAgent(host)
        yield* second.driver.destroy(vanished)
        const id = makeSandboxId()
        yield* second.driver.create(
          new SandboxSpec({ sandboxId: id, template: "base", env: {}, cpu: 1, ramMb: 64, diskGb: 1, exposedPorts: [] })
        )
        yield* second.stop
        return id
      })
      const journal = yield* Journal.make(NodePath.join(host.dataDir, "agent", "journal"))
      const entry = (yield* journal.get(halfMade))!
      yield* journal.put(new JournalEntry({ ...entry, pending: "create" }))
      const before = (yield* reports.all).length

      const third = yield* startAgent(host)
      // The reconcile's reports (the two kept and the vanished one) reach the test's consumer after
      // the agent is up, not necessarily before (CI saw the third one missing).
      const reconciled = yield* eventually(
        Effect.map(reports.all, (all) => all.slice(before)),
        (since) => since.length >= 3
      )
      const after = reconciled.map((r) => r.report)
      const byId = new Map(after.map((r) => [r.sandboxId, r]))
      assert.strictEqual(byId.get(keptRunning)?.status, "running")
      assert.strictEqual(byId.get(keptRunning)?.internalIp, report.internalIp)
      assert.isTrue(byId.get(keptRunning)?.agentReady)
      assert.strictEqual(byId.get(keptStopped)?.status, "stopped")
      assert.strictEqual(byId.get(vanished)?.status, "destroyed")
      assert.isFalse(byId.has(halfMade))
      assert.isFalse(byId.has(orphan))
      assert.match(reconciled[0]!.msgId ?? "", new RegExp(`^reconcile:${host.hostId}:\\d+:`))
      assert.sameMembers((yield* third.driver.list).map((r) => r.sandboxId), [keptRunning, keptStopped])
      assert.sameDeepMembers((yield* journal.list).map((e) => [e.sandboxId, e.pending]), [[keptRunning, null], [
        keptStopped,
        null
      ]])

      yield* destroyAndWait(third, keptRunning)
      yield* destroyAndWait(third, keptStopped)
      assert.deepStrictEqual(processesOfHost(host.hostId), [])
    }))
})
