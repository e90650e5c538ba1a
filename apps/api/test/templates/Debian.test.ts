/**
 * A `debian` template through the API on an agent with egress on (the sandboxes' way out, as in
 * production): a build step runs a real `apt-get update && apt-get install` against Debian's
 * archive through the egress proxy (`SVC_EGRESS_DEFAULT` allow), and a sandbox of the template
 * has the package and runs python3. The debian archive comes from the run's image cache
 * (`@svc/testing/ImageCache`): built once, here only extracted. Where the machine reaches the
 * archive at a non-public address (a mirror of its network), that address is an allowed subnet.
 */
import { expect, layer } from "@effect/vitest"
import { startAgent as startAgentFixture } from "@svc/agent/testing/Agent"
import { SecretBox } from "@svc/crypto/SecretBox"
import type { OrgId } from "@svc/domain/Ids"
import * as Runtime from "@svc/runtime/Runtime"
import { fakePublicHost } from "@svc/testing/FakePublicHost"
import { TEST_IMAGE_CACHE_DIR } from "@svc/testing/ImageCache"
import * as TestDatabase from "@svc/testing/TestDatabase"
import * as TestNats from "@svc/testing/TestNats"
import { Context, Duration, Effect, Layer } from "effect"
import * as Dns from "node:dns/promises"
import { call, EventLog, eventually, Identity, makeHost, serveApi } from "../../testing/Sandboxes.ts"

class Env extends Context.Service<Env, {
  readonly base: string
  readonly org: { readonly id: OrgId; readonly token: string }
}>()("test/TemplatesDebian/Env") {}

const EnvLayer = Layer.effect(
  Env,
  Effect.gen(function*() {
    // Its bridge and egress settings: the proxy answers the fake names first, every other name
    // from the machine's resolver, and lets public addresses through.
    const fake = yield* fakePublicHost
    // Where this machine reaches Debian's archive. A build machine may reach it through an address
    // outside the public internet (a mirror or proxy of its network): the operator lets the
    // sandboxes reach it as any other non-public subnet (SVC_EGRESS_ALLOWED_SUBNETS).
    const mirror = yield* Effect.promise(() => Dns.lookup("deb.debian.org", { family: 4 }))
    const base = yield* serveApi
    const host = yield* makeHost
    yield* startAgentFixture(host, {
      region: "local",
      capacity: { cpu: 64, ramMb: 64 * 1024, diskGb: 500 },
      imageCacheDir: TEST_IMAGE_CACHE_DIR,
      ...fake.agentOptions,
      egress: {
        ...fake.agentOptions.egress,
        defaultAction: "allow",
        allowedSubnets: [
          ...fake.agentOptions.egress.allowedSubnets,
          { address: mirror.address, prefix: 32, family: "ipv4" as const }
        ]
      }
    })
    const identity = yield* Identity
    return { base, org: yield* identity.org("templates-debian") }
  })
).pipe(
  Layer.provideMerge(Layer.mergeAll(Runtime.make({ supervisor: { intervalMs: 200 } }), Identity.layer, EventLog.layer)),
  Layer.provideMerge(Layer.mergeAll(TestDatabase.layerWithUrl, TestNats.layer, SecretBox.layer))
)

const api = (method: string, path: string, body?: unknown) =>
  Effect.flatMap(
    Effect.service(Env),
    (env) => call(env.base, method, path, { token: env.org.token, ...(body !== undefined ? { body } : {}) })
  )

const sh = (id: string, script: string) =>
  Effect.map(api("POST", `/v1/sandboxes/${id}/exec`, { cmd: ["sh", "-c", script], timeout_ms: 60_000 }), (r) => {
    expect(r.status, r.text).toBe(200)
    return r.json as { exit_code: number; stdout: string; stderr: string }
  })

// Each test may build the debian root on a machine that never did (mmdebstrap, ~1 min, more on a
// loaded machine) and run apt against Debian's archive: minutes, not the default 60 s.
layer(EnvLayer, { excludeTestServices: true, timeout: 900_000 })("templates on debian", (it) => {
  it.effect(
    "a debian template: apt-get installs a package from Debian's archive through egress; its sandbox has it and runs python3",
    () =>
      Effect.gen(function*() {
        const made = yield* api("POST", "/v1/templates", {
          name: "deb-tools",
          base: "debian",
          steps: [
            { run: "apt-get update && apt-get install -y --no-install-recommends tree && rm -rf /var/lib/apt/lists/*" },
            { file: { path: "/opt/hello.py", content: "import sys\nprint('python', sys.version_info[0])\n" } }
          ]
        })
        expect(made.status, made.text).toBe(202)
        const id = made.json.id as string
        const ready = yield* eventually(
          api("GET", `/v1/templates/${id}`),
          (r) => r.json?.state !== "building",
          Duration.minutes(10)
        )
        const log = (yield* api("GET", `/v1/templates/${id}/logs`)).text
        expect(ready.json, log).toMatchObject({ state: "ready", base: "debian", errorMessage: null })
        // apt fetched from the real archive (its lines name the mirror) and unpacked the package.
        expect(log).toMatch(/Get:\d+ http:\/\/deb\.debian\.org\/debian bookworm/)
        expect(log).toMatch(/Setting up tree/)

        const created = yield* api("POST", "/v1/sandboxes", { template: "deb-tools", ram_mb: 256 })
        expect(created.status, created.text).toBe(201)
        const sandbox = created.json.id as string
        const running = yield* eventually(
          api("GET", `/v1/sandboxes/${sandbox}`),
          (r) => r.json?.state === "running" || r.json?.state === "error",
          Duration.minutes(3)
        )
        expect(running.json.state, running.text).toBe("running")
        const seen = yield* sh(
          sandbox,
          "python3 /opt/hello.py; tree --version | cut -d' ' -f1; . /etc/os-release; echo $ID; id -u"
        )
        expect(seen.exit_code, seen.stderr).toBe(0)
        expect(seen.stdout).toBe("python 3\ntree\ndebian\n0\n")
        // apt works in the template's sandboxes too (the same egress path), not only in builds.
        const apt = yield* sh(sandbox, "apt-get update >/dev/null 2>&1 && apt-cache policy tree | head -2")
        expect(apt.exit_code, apt.stderr).toBe(0)
        expect(apt.stdout).toMatch(/^tree:\n\s+Installed: \S+/)

        yield* api("DELETE", `/v1/sandboxes/${sandbox}`)
      }),
    600_000
  )

  it.effect(
    "a sandbox of the debian root itself: its template record, python3 inside, a snapshot of it",
    () =>
      Effect.gen(function*() {
        const root = yield* api("GET", "/v1/templates/debian")
        expect(root.status, root.text).toBe(200)
        expect(root.json).toMatchObject({ name: "debian", state: "ready", base: "debian" })
        const created = yield* api("POST", "/v1/sandboxes", { template: "debian", ram_mb: 256 })
        expect(created.status, created.text).toBe(201)
        expect(created.json.templateId).toBe(root.json.id)
        const sandbox = created.json.id as string
        const running = yield* eventually(
          api("GET", `/v1/sandboxes/${sandbox}`),
          (r) => r.json?.state === "running" || r.json?.state === "error",
          Duration.minutes(3)
        )
        expect(running.json.state, running.text).toBe("running")
        const seen = yield* sh(sandbox, "python3 -c 'print(6 * 7)' && echo kept > /root/note")
        expect(seen.stdout).toBe("42\n")
        const snap = yield* api("POST", `/v1/sandboxes/${sandbox}/snapshot`, { name: "deb-snap" })
        expect(snap.status, snap.text).toBe(202)
        const ready = yield* eventually(
          api("GET", `/v1/templates/${snap.json.id}`),
          (r) => r.json?.state !== "building",
          Duration.minutes(3)
        )
        expect(ready.json).toMatchObject({ state: "ready", base: "debian" })
        const copy = yield* api("POST", "/v1/sandboxes", { template: "deb-snap", ram_mb: 256 })
        yield* eventually(api("GET", `/v1/sandboxes/${copy.json.id}`), (r) => r.json?.state === "running")
        expect((yield* sh(copy.json.id, "cat /root/note; cat /etc/debian_version")).stdout).toMatch(/^kept\n\d+/)
        for (const id of [sandbox, copy.json.id]) yield* api("DELETE", `/v1/sandboxes/${id}`)
      }),
    600_000
  )
})
