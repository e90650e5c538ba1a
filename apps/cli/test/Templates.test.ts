/**
 * `svc template create --image` and `svc template build ./folder` (src/Commands/Templates.ts),
 * the CLI a process of its own, against the real API, agent and a real registry
 * (@svc/api/testing/Registries): a template from an image reference with its log followed; a
 * folder's Dockerfile built with the folder as its context and `--build-arg`s, then run as a
 * sandbox; a failing build, a folder without a Dockerfile, a bad build arg and a create without
 * a source exit 1 with the reason.
 */
import { expect, layer } from "@effect/vitest"
import { push, Registries, TestLayer } from "@svc/api/testing/Registries"
import { api, create, waitState } from "@svc/api/testing/SandboxesEnv"
import { Effect } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as NodePath from "node:path"
import { svcWithin } from "./support/Cli.ts"

/** `svc args...` with the org's key (a build may take minutes): its exit code, stdout and stderr. */
const svc = svcWithin(180_000)

layer(TestLayer, { excludeTestServices: true, timeout: 300_000 })(
  "svc template create --image, svc template build",
  (it) => {
    it.effect("from an image reference; a folder's Dockerfile with its context and build args; refusals exit 1", () =>
      Effect.gen(function*() {
        const { open } = yield* Registries
        yield* push(open, "cli/base", "1", {
          layers: [{ files: { "etc/passwd": "root:x:0:0:root:/root:/bin/sh\n", "srv/from-image": "image\n" } }]
        })
        const image = `${open.host}/cli/base:1`

        const fromImage = yield* svc("template", "create", "--name", "cli-image", "--image", image, "--wait", "--json")
        expect(fromImage.code, fromImage.stderr).toBe(0)
        expect(JSON.parse(fromImage.stdout)).toMatchObject({ name: "cli-image", state: "ready", image_ref: image })
        // The build's log went to stderr as it ran.
        expect(fromImage.stderr).toMatch(/layer 1\/1 sha256:[0-9a-f]{12} pulled/)

        const folder = Fs.mkdtempSync(NodePath.join(Os.tmpdir(), "svc-cli-build-"))
        const app = NodePath.join(folder, "app")
        Fs.mkdirSync(NodePath.join(app, "conf"), { recursive: true })
        Fs.writeFileSync(NodePath.join(app, "conf", "settings.ini"), "[app]\nmode=cli\n")
        Fs.writeFileSync(NodePath.join(app, "start.sh"), "echo started\n", { mode: 0o755 })
        Fs.writeFileSync(
          NodePath.join(app, "Dockerfile"),
          [
            `FROM ${image}`,
            "ARG WHO=nobody",
            "ARG LEVEL=1",
            "WORKDIR /srv/app",
            "COPY . .",
            "RUN echo \"$WHO at $LEVEL\" > built.txt"
          ].join("\n")
        )
        const built = yield* svc("template", "build", app, "--build-arg", "WHO=cli", "--build-arg", "LEVEL=2", "--json")
        expect(built.code, built.stderr).toBe(0)
        const template = JSON.parse(built.stdout)
        // Named after its folder, built from the image.
        expect(template).toMatchObject({ name: "app", state: "ready", image_ref: image })
        expect(built.stderr).toMatch(/run: echo "\$WHO at \$LEVEL" > built\.txt/)
        const sandbox = yield* create({ template: template.id })
        yield* waitState(sandbox.id, "running")
        const seen = yield* api("POST", `/v1/sandboxes/${sandbox.id}/exec`, {
          body: { cmd: ["sh", "-c", "pwd; cat built.txt conf/settings.ini /srv/from-image; ./start.sh; ls"] }
        })
        expect(seen.json.stdout).toBe(
          "/srv/app\ncli at 2\n[app]\nmode=cli\nimage\nstarted\nDockerfile\nbuilt.txt\nconf\nstart.sh\n"
        )
        yield* api("DELETE", `/v1/sandboxes/${sandbox.id}`)

        // A failing step: the log says which, exit 1.
        Fs.writeFileSync(NodePath.join(app, "Dockerfile"), `FROM ${image}\nRUN echo failing; exit 3\n`)
        const failed = yield* svc("template", "build", app, "--name", "cli-failing")
        expect(failed.code).toBe(1)
        expect(failed.stderr).toMatch(/failing/)
        expect(failed.stderr).toMatch(/build failed: /)

        const empty = Fs.mkdtempSync(NodePath.join(Os.tmpdir(), "svc-cli-empty-"))
        const noDockerfile = yield* svc("template", "build", empty)
        expect(noDockerfile.code).toBe(1)
        expect(noDockerfile.stderr).toContain(`cannot read ${NodePath.join(empty, "Dockerfile")}: ENOENT`)
        const badArg = yield* svc("template", "build", app, "--build-arg", "=x")
        expect(badArg.code).toBe(1)
        expect(badArg.stderr).toContain("--build-arg =x: expected NAME=value")
        const noSource = yield* svc("template", "create", "--name", "nothing")
        expect(noSource.code).toBe(1)
        expect(noSource.stderr).toContain("give --file with the template's JSON, or --image with a reference")
        Fs.rmSync(folder, { recursive: true, force: true })
        Fs.rmSync(empty, { recursive: true, force: true })
      }))
  }
)
