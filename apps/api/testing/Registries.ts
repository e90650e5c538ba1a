/**
 * Two real OCI registries for the template tests (@svc/testing/TestRegistry): one open, one
 * behind htpasswd basic auth, named `open.registry.test` and `private.registry.test` (a hosts
 * file the agent reads, SVC_REGISTRY_HOSTS_FILE: a secret's allowed_hosts names domains), their
 * CAs trusted (SVC_REGISTRY_CA_FILE) and loopback allowed (SVC_REGISTRY_ALLOWED_SUBNETS), set
 * before the platform's layers start; and the calls those tests make.
 */
import { expect } from "@effect/vitest"
import { startTestRegistry, type TestRegistry, writeOciLayout } from "@svc/testing/TestRegistry"
import { Context, Duration, Effect, Layer } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { eventually } from "./Sandboxes.ts"
import { api, EnvLayer, waitState } from "./SandboxesEnv.ts"

export const AUTH = { user: "puller", password: "s3cret-registry-pass" }

export class Registries extends Context.Service<Registries, {
  readonly open: TestRegistry
  readonly private: TestRegistry
  readonly managersFile: string
}>()("test/TemplatesImages/Registries") {}

// The registries first: the agent reads their CA and the loopback allowance when it starts.
export const RegistriesLayer = Layer.effect(
  Registries,
  Effect.gen(function*() {
    const open = yield* startTestRegistry({ name: "open.registry.test" })
    // Named like any registry: a secret's allowed_hosts names domains (never loopback).
    const closed = yield* startTestRegistry({ auth: AUTH, name: "private.registry.test" })
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "svc-registry-cas-"))
    yield* Effect.addFinalizer(() => Effect.sync(() => Fs.rmSync(dir, { recursive: true, force: true })))
    const hostsFile = Path.join(dir, "hosts")
    // internal.registry.test: a name resolving to an address the operator did not allow.
    Fs.writeFileSync(
      hostsFile,
      "127.0.0.1 open.registry.test private.registry.test\n10.20.30.40 internal.registry.test\n"
    )
    process.env["SVC_REGISTRY_HOSTS_FILE"] = hostsFile
    // The test's key manages the org's secrets once its id is written here.
    const managersFile = Path.join(dir, "secret-managers")
    Fs.writeFileSync(managersFile, "")
    process.env["SVC_SECRET_MANAGER_API_KEY_IDS_FILE"] = managersFile
    const caFile = Path.join(dir, "cas.pem")
    Fs.writeFileSync(
      caFile,
      Fs.readFileSync(open.certificates.caFile, "utf8") + Fs.readFileSync(closed.certificates.caFile, "utf8")
    )
    process.env["SVC_REGISTRY_CA_FILE"] = caFile
    process.env["SVC_REGISTRY_ALLOWED_SUBNETS"] = "127.0.0.0/8,::1/128"
    return { open, private: closed, managersFile }
  })
)

export const TestLayer = EnvLayer.pipe(Layer.provideMerge(RegistriesLayer))

/** Builds `image` as an OCI layout and pushes it as `repository:tag`; its manifest digest. */
export const push = (
  registry: TestRegistry,
  repository: string,
  tag: string,
  image: Parameters<typeof writeOciLayout>[2]
) =>
  Effect.gen(function*() {
    const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "svc-oci-"))
    try {
      const digest = writeOciLayout(dir, tag, image)
      yield* registry.push(dir, tag, `${repository}:${tag}`)
      return digest
    } finally {
      Fs.rmSync(dir, { recursive: true, force: true })
    }
  })

export const build = (body: Record<string, unknown>) =>
  Effect.gen(function*() {
    const res = yield* api("POST", "/v1/templates", { body })
    expect(res.status, res.text).toBe(202)
    expect(res.json).toMatchObject({ name: body["name"], state: "building", image: null })
    return res.json as { id: string }
  })

export const settled = (id: string) =>
  Effect.map(
    eventually(api("GET", `/v1/templates/${id}`), (r) => r.json?.state !== "building", Duration.seconds(120)),
    (r) => r.json as Record<string, any>
  )

export const logOf = (id: string) => Effect.map(api("GET", `/v1/templates/${id}/logs`), (r) => r.text)

export const exec = (id: string, body: Record<string, unknown>) =>
  Effect.map(api("POST", `/v1/sandboxes/${id}/exec`, { body }), (r) => {
    expect(r.status, r.text).toBe(200)
    return r.json as { exit_code: number; stdout: string; stderr: string }
  })

export const removeSandbox = (id: string) =>
  Effect.gen(function*() {
    yield* api("DELETE", `/v1/sandboxes/${id}`)
    yield* waitState(id, "deleted")
  })

export const PASSWD = "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1001:app:/home/app:/bin/sh\n"
export const GROUP = "root:x:0:\napp:x:1001:\n"

export const BASE_LAYER = {
  files: {
    "etc/passwd": PASSWD,
    "etc/group": GROUP,
    "usr/share/base/marker": "the shared base\n",
    "data/a": "a\n",
    "data/b": "b\n",
    "opt/old/x": "old\n",
    "dev/": null,
    "etc/hosts": "10.9.9.9 not-from-the-image\n"
  }
}
