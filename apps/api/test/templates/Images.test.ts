/**
 * Templates from OCI images through the API, against real registries (apps/api/testing/Registries:
 * `docker-registry` on loopback, TLS from a throwaway CA, one open and one behind htpasswd basic
 * auth), images made and pushed by the test: a plain image run as a sandbox; one with several
 * layers (whiteouts, an opaque folder) run the way its config says (User, WorkingDir, Entrypoint +
 * Cmd, ExposedPorts); a second image sharing a base layer takes it from the layer cache; a private
 * image with the right secret, without one, with a refused password, with a secret that does not
 * name the registry (400) and without `secrets:use` (403); a wrong platform, a missing tag, a
 * tampered layer, and a registry at a non-public address the operator did not allow.
 */
import { expect, layer } from "@effect/vitest"
import { writeOciLayout } from "@svc/testing/TestRegistry"
import { Duration, Effect } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import {
  AUTH,
  BASE_LAYER,
  build,
  exec,
  logOf,
  push,
  Registries,
  removeSandbox,
  settled,
  TestLayer
} from "../../testing/Registries.ts"
import { eventually, Identity } from "../../testing/Sandboxes.ts"
import { api, create, Env, expectError, waitState } from "../../testing/SandboxesEnv.ts"

layer(TestLayer, { excludeTestServices: true, timeout: 300_000 })("templates from OCI images", (it) => {
  it.effect("a plain image: pulled, its digest recorded, its files in a sandbox", () =>
    Effect.gen(function*() {
      const { open } = yield* Registries
      const digest = yield* push(open, "team/plain", "1.0", {
        layers: [{ files: { "srv/hello.txt": "hello from the image\n", "srv/": null } }],
        config: { Env: ["GREETING=from-image", "PATH=/usr/local/bin:/usr/bin:/bin"] }
      })
      const made = yield* build({ name: "plain", image: `${open.host}/team/plain:1.0` })
      const ready = yield* settled(made.id)
      expect(ready, JSON.stringify(ready)).toMatchObject({
        state: "ready",
        errorMessage: null,
        image_ref: `${open.host}/team/plain:1.0`,
        image_digest: digest
      })
      expect(ready.image).toMatch(/^sha256:[0-9a-f]{64}$/)
      expect(yield* logOf(made.id)).toMatch(/layer 1\/1 sha256:[0-9a-f]{12} pulled/)

      const sandbox = yield* create({ template: "plain" })
      yield* waitState(sandbox.id, "running")
      const seen = yield* exec(sandbox.id, { cmd: ["sh", "-c", "cat /srv/hello.txt; echo $GREETING; id -u; pwd"] })
      expect(seen.stdout).toBe("hello from the image\nfrom-image\n0\n/\n")
      yield* removeSandbox(sandbox.id)
    }))

  it.effect("layers with whiteouts and an opaque folder; run as its User in its WorkingDir; Entrypoint + Cmd; ExposedPorts", () =>
    Effect.gen(function*() {
      const { open } = yield* Registries
      yield* push(open, "team/app", "v2", {
        layers: [
          BASE_LAYER,
          {
            files: {
              "data/.wh.a": "",
              "opt/old/.wh..wh..opq": "",
              "opt/old/y": "new\n",
              "home/app/": null,
              "home/app/notes.txt": "mine\n",
              "usr/local/bin/tool": "#!/bin/sh\necho tool ran\n"
            },
            modes: { "usr/local/bin/tool": 0o4755 },
            owners: { "home/app/": "1000:1001", "home/app/notes.txt": "1000:1001" }
          }
        ],
        config: {
          User: "app",
          WorkingDir: "/home/app",
          Entrypoint: ["/bin/sh", "-c"],
          Cmd: ["echo started by $(id -u) in $(pwd) > /tmp/started; sleep 600"],
          ExposedPorts: { "8080/tcp": {}, "53/udp": {} },
          Env: ["MODE=app"]
        }
      })
      const made = yield* build({ name: "app-image", image: `${open.host}/team/app:v2` })
      const ready = yield* settled(made.id)
      expect(ready, JSON.stringify(ready)).toMatchObject({ state: "ready" })
      expect(ready.start_cmd).toBe("/bin/sh -c 'echo started by $(id -u) in $(pwd) > /tmp/started; sleep 600'")

      const sandbox = yield* create({ template: made.id })
      const running = yield* waitState(sandbox.id, "running")
      expect(running.exposed_ports ?? running.exposedPorts).toEqual([8080])
      const seen = yield* exec(sandbox.id, {
        cmd: ["sh", "-c", "id -u; id -g; pwd; ls /data; ls /opt/old; cat notes.txt; echo $MODE; cat /etc/hosts"]
      })
      // uid, gid, cwd; /data/a whited out; /opt/old replaced whole; its own file; its env.
      expect(seen.stdout.startsWith("1000\n1001\n/home/app\nb\ny\nmine\napp\n"), seen.stdout).toBe(true)
      expect(seen.stdout).not.toMatch(/not-from-the-image/)
      // The call may say otherwise: a cwd of its own.
      const elsewhere = yield* exec(sandbox.id, { cmd: ["pwd"], cwd: "/tmp" })
      expect(elsewhere.stdout).toBe("/tmp\n")
      // The start command ran as the image's user, in its folder.
      const started = yield* eventually(
        exec(sandbox.id, { cmd: ["cat", "/tmp/started"] }),
        (r) => r.exit_code === 0,
        Duration.seconds(30)
      )
      expect(started.stdout).toBe("started by 1000 in /home/app\n")
      // A non-root user has no capabilities: root's files stay root's.
      const denied = yield* exec(sandbox.id, { cmd: ["sh", "-c", "echo x > /etc/passwd"] })
      expect(denied.exit_code).not.toBe(0)
      yield* removeSandbox(sandbox.id)

      // A second image on the same base: the base layer comes from the layer cache.
      yield* push(open, "team/other", "1", {
        layers: [BASE_LAYER, { files: { "srv/other": "other\n", "srv/": null } }]
      })
      const other = yield* build({ name: "other-image", image: `${open.host}/team/other:1` })
      expect((yield* settled(other.id)).state).toBe("ready")
      const log = yield* logOf(other.id)
      expect(log).toMatch(/layer 1\/2 sha256:[0-9a-f]{12} cached/)
      expect(log).toMatch(/layer 2\/2 sha256:[0-9a-f]{12} pulled/)
    }))

  it.effect("a private image: pulled with the right secret; refused without it, with a wrong password, or a secret for another host", () =>
    Effect.gen(function*() {
      const registries = yield* Registries
      const registry = registries.private
      const me = yield* api("GET", "/v1/auth/me")
      Fs.writeFileSync(registries.managersFile, me.json.credential.id)
      yield* push(registry, "team/private", "1", {
        layers: [{ files: { "srv/secret-app": "private bits\n", "srv/": null } }]
      })
      const ref = `${registry.host}/team/private:1`
      const secret = yield* api("POST", "/v1/secrets", {
        body: { name: "registry-cred", value: `${AUTH.user}:${AUTH.password}`, allowed_hosts: [registry.host] }
      })
      expect(secret.status, secret.text).toBe(201)
      const made = yield* build({ name: "private", image: ref, registry_secret: "registry-cred" })
      const ready = yield* settled(made.id)
      expect(ready, JSON.stringify(ready)).toMatchObject({ state: "ready", image_ref: ref })
      expect(yield* logOf(made.id)).not.toContain(AUTH.password)

      const without = yield* build({ name: "private-anon", image: ref })
      expect(yield* settled(without.id)).toMatchObject({
        state: "failed",
        errorMessage: "the registry asks for a credential (registry_secret) and none was given"
      })

      const wrong = yield* api("POST", "/v1/secrets", {
        body: { name: "registry-wrong", value: `${AUTH.user}:not-the-password`, allowed_hosts: [registry.host] }
      })
      expect(wrong.status, wrong.text).toBe(201)
      const refused = yield* build({ name: "private-wrong", image: ref, registry_secret: wrong.json.id })
      expect((yield* settled(refused.id)).errorMessage).toMatch(/^the registry refused the credential/)

      // A secret is sent only where its allowed_hosts say: not to this registry.
      const elsewhere = yield* api("POST", "/v1/secrets", {
        body: {
          name: "registry-elsewhere",
          value: `${AUTH.user}:${AUTH.password}`,
          allowed_hosts: ["registry.example.com"]
        }
      })
      expect(elsewhere.status, elsewhere.text).toBe(201)
      const res = yield* api("POST", "/v1/templates", {
        body: { name: "private-elsewhere", image: ref, registry_secret: "registry-elsewhere" }
      })
      expectError(res, 400, "invalid_request")
      expect(res.json.issues[0].path).toBe("registry_secret")
      // Using a secret is `secrets:use`.
      const env = yield* Env
      const limited = yield* (yield* Identity).key(env.org.id, ["templates:write", "templates:read"])
      const unscoped = yield* api("POST", "/v1/templates", {
        body: { name: "private-scope", image: ref, registry_secret: "registry-cred" },
        token: limited
      })
      expectError(unscoped, 403, "insufficient_scope")
      expectError(
        yield* api("POST", "/v1/templates", { body: { name: "private-none", image: ref, registry_secret: "nope" } }),
        400,
        "invalid_request"
      )
    }))

  it.effect("refusals: wrong platform, missing tag, tampered layer, non-public registry, bad input", () =>
    Effect.gen(function*() {
      const { open } = yield* Registries
      yield* push(open, "team/arm", "1", {
        layers: [{ files: { "srv/arm": "arm\n", "srv/": null } }],
        architecture: "arm64"
      })
      const arm = yield* build({ name: "arm", image: `${open.host}/team/arm:1` })
      expect(yield* settled(arm.id)).toMatchObject({
        state: "failed",
        errorMessage: "the image is for linux/arm64, not linux/amd64"
      })

      const missing = yield* build({ name: "missing", image: `${open.host}/team/arm:no-such-tag` })
      expect(yield* settled(missing.id)).toMatchObject({
        state: "failed",
        errorMessage: `the image team/arm:no-such-tag was not found in ${open.host}`
      })

      // The registry serves other bytes than the layer's digest names.
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "svc-oci-"))
      writeOciLayout(dir, "1", { layers: [{ files: { "srv/tampered": "original bytes\n", "srv/": null } }] })
      yield* open.push(dir, "1", "team/tampered:1")
      const index = JSON.parse(Fs.readFileSync(Path.join(dir, "index.json"), "utf8"))
      const manifest = JSON.parse(
        Fs.readFileSync(Path.join(dir, "blobs", "sha256", index.manifests[0].digest.slice(7)), "utf8")
      )
      const layerDigest: string = manifest.layers[0].digest
      const stored = open.blobFile(layerDigest)
      const bytes = Fs.readFileSync(stored)
      const other = Buffer.from(bytes)
      other[other.length - 9] = other[other.length - 9]! ^ 0xff
      Fs.writeFileSync(stored, other)
      Fs.rmSync(dir, { recursive: true, force: true })
      const tampered = yield* build({ name: "tampered", image: `${open.host}/team/tampered:1` })
      expect((yield* settled(tampered.id)).errorMessage).toBe(
        `layer ${layerDigest.slice(0, 19)} does not match its digest: tampered with or corrupted`
      )

      // 10.0.0.0/8 is not among the allowed subnets (loopback is, for the test registries).
      const internal = yield* build({ name: "internal", image: "10.20.30.40:5000/team/app:1" })
      expect((yield* settled(internal.id)).errorMessage).toMatch(
        /^the registry host 10\.20\.30\.40 is not a public address/
      )

      for (
        const body of [
          { name: "bad-ref", image: "Not A Reference" },
          { name: "two-bases", image: `${open.host}/team/plain:1.0`, base: "base" },
          { name: "secret-alone", registry_secret: "registry-cred" }
        ]
      ) {
        expectError(yield* api("POST", "/v1/templates", { body }), 400, "invalid_request")
      }
    }))
})
