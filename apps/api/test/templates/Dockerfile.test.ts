/**
 * A template from a Dockerfile through the API, FROM an image on a real registry
 * (apps/api/testing/Registries): COPY from its context, ARG from build_args, WORKDIR, USER, CMD,
 * EXPOSE and HEALTHCHECK; built again (every step from the layer cache) and with a line changed
 * (rebuilt from it); refusals name their line, a context entry leaving it is refused.
 */
import { expect, layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { execFileSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import {
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
import { eventually } from "../../testing/Sandboxes.ts"
import { api, create, expectError, waitState } from "../../testing/SandboxesEnv.ts"

layer(TestLayer, { excludeTestServices: true, timeout: 300_000 })("templates from a Dockerfile", (it) => {
  it.effect("a Dockerfile FROM an image: COPY from the context, ARG, WORKDIR, USER, CMD, EXPOSE, HEALTHCHECK; cached on a second build", () =>
    Effect.gen(function*() {
      const { open } = yield* Registries
      yield* push(open, "team/df-base", "1", {
        layers: [BASE_LAYER],
        config: { User: "app", WorkingDir: "/", Env: ["FROM_IMAGE=yes"] }
      })
      const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "svc-context-"))
      Fs.mkdirSync(Path.join(dir, "app", "lib"), { recursive: true })
      Fs.writeFileSync(Path.join(dir, "app", "main.sh"), "echo main\n", { mode: 0o755 })
      Fs.writeFileSync(Path.join(dir, "app", "lib", "x.txt"), "x\n")
      Fs.writeFileSync(Path.join(dir, "notes.txt"), "notes\n")
      const context = execFileSync("tar", ["-czf", "-", "-C", dir, "."]).toString("base64")
      const escaping = execFileSync("tar", ["-czPf", "-", "--transform", "s,^\\./,../,", "-C", dir, "./notes.txt"])
        .toString("base64")
      Fs.rmSync(dir, { recursive: true, force: true })
      const dockerfile = (run: string) =>
        [
          "# a comment",
          `FROM ${open.host}/team/df-base:1`,
          "ARG VERSION=0.0",
          "ENV APP_HOME=/srv/app",
          "USER root",
          "WORKDIR $APP_HOME",
          "COPY app/ ./",
          "COPY --chown=1000:1001 notes.txt /srv/notes/",
          `RUN ${run} \\`,
          "  && chown -R 1000:1001 .",
          "USER app",
          "EXPOSE 9090",
          "LABEL team=platform",
          "CMD [\"sh\", \"-c\", \"echo up > /tmp/up; sleep 600\"]",
          "HEALTHCHECK --interval=5s CMD test -f /tmp/up"
        ].join("\n")
      const body = (name: string, run: string) => ({
        name,
        dockerfile: dockerfile(run),
        context,
        build_args: { VERSION: "1.2.3" }
      })
      const made = yield* build(body("df", "echo \"version $VERSION\" > version.txt"))
      const ready = yield* settled(made.id)
      expect(ready, JSON.stringify(ready)).toMatchObject({
        state: "ready",
        image_ref: `${open.host}/team/df-base:1`,
        ready_cmd: "test -f /tmp/up",
        start_cmd: "sh -c 'echo up > /tmp/up; sleep 600'"
      })
      const sandbox = yield* create({ template: "df" })
      const running = yield* waitState(sandbox.id, "running")
      expect(running.exposed_ports ?? running.exposedPorts).toEqual([9090])
      const seen = yield* exec(sandbox.id, {
        cmd: [
          "sh",
          "-c",
          "pwd; id -u; cat version.txt; sh main.sh; cat lib/x.txt; stat -c %u /srv/notes/notes.txt; echo $APP_HOME $FROM_IMAGE ${VERSION:-unset}"
        ]
      })
      expect(seen.stdout).toBe("/srv/app\n1000\nversion 1.2.3\nmain\nx\n1000\n/srv/app yes unset\n")
      const healthy = yield* eventually(
        api("GET", `/v1/sandboxes/${sandbox.id}`),
        (r) => r.json?.runtime_ready === true,
        Duration.seconds(40)
      )
      expect(healthy.json.runtime_reason).toBe(null)
      yield* removeSandbox(sandbox.id)

      // The same Dockerfile again: every step from the layer cache.
      const again = yield* build(body("df-again", "echo \"version $VERSION\" > version.txt"))
      expect((yield* settled(again.id)).state).toBe("ready")
      const log = yield* logOf(again.id)
      expect(log).toMatch(/step 3\/\d+ cached/)
      expect(log).not.toMatch(/ run: /)
      // The RUN line changed: the steps before it cached, it runs again.
      const changed = yield* build(body("df-changed", "echo \"release $VERSION\" > version.txt"))
      expect((yield* settled(changed.id)).state).toBe("ready")
      const changedLog = yield* logOf(changed.id)
      expect(changedLog).toMatch(/step 5\/9 cached: sha256/)
      expect(changedLog).toMatch(/step 6\/9 run: echo "release \$VERSION"/)

      // Refusals name the line; a context entry leaving it is refused.
      const volume = yield* api("POST", "/v1/templates", {
        body: { name: "df-volume", dockerfile: "FROM base\nRUN true\nVOLUME /data\nFROM debian\n" }
      })
      expectError(volume, 400, "invalid_request")
      expect(volume.json.issues).toEqual([
        { path: "dockerfile:3", message: "VOLUME is not supported (a sandbox's volumes are attached at create)" },
        { path: "dockerfile:4", message: "a second FROM: only single-stage Dockerfiles are supported" }
      ])
      const escape = yield* api("POST", "/v1/templates", {
        body: { name: "df-escape", dockerfile: "FROM base\nCOPY notes.txt /\n", context: escaping }
      })
      expectError(escape, 400, "invalid_request")
      expect(escape.json.issues[0].path).toBe("context")
      const noContext = yield* api("POST", "/v1/templates", {
        body: { name: "df-nocontext", dockerfile: "FROM base\nCOPY notes.txt /\n" }
      })
      expectError(noContext, 400, "invalid_request")
    }))
})
