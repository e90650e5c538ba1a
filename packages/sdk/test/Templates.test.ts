/**
 * `svc.templates.create` (src/Templates.ts) for images and Dockerfiles, against the real API,
 * agent and a real registry (@svc/api/testing/Registries): a template from an image reference;
 * one from a Dockerfile whose `context` is a local folder the SDK packs (a nested file, an
 * executable's mode, a symlink) with a build arg; the tar.gz's bytes work as well; a path that is
 * no folder is refused before anything is sent.
 */
import { expect, layer } from "@effect/vitest"
import { push, Registries, TestLayer } from "@svc/api/testing/Registries"
import { Env } from "@svc/api/testing/SandboxesEnv"
import { Effect } from "effect"
import { execFileSync } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { Svc } from "../src/index.ts"

const client = Effect.map(Effect.service(Env), (env) => new Svc({ baseUrl: env.base, apiKey: env.org.token }))

layer(TestLayer, { excludeTestServices: true, timeout: 300_000 })(
  "svc.templates.create: image, dockerfile + context",
  (it) => {
    it.effect("from an image; from a Dockerfile with a local folder as its context, packed by the SDK", () =>
      Effect.gen(function*() {
        const { open } = yield* Registries
        const svc = yield* client
        yield* push(open, "sdk/base", "1", {
          layers: [{ files: { "etc/passwd": "root:x:0:0:root:/root:/bin/sh\n", "srv/from-image": "image\n" } }],
          config: { Env: ["PATH=/usr/local/bin:/usr/bin:/bin"] }
        })
        const image = `${open.host}/sdk/base:1`
        const fromImage = yield* Effect.promise(() => svc.templates.create({ name: "sdk-image", image }))
        expect(fromImage).toMatchObject({ state: "ready", image_ref: image })

        const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "svc-sdk-context-"))
        Fs.mkdirSync(Path.join(dir, "app", "lib"), { recursive: true })
        Fs.writeFileSync(Path.join(dir, "app", "run.sh"), "echo ran\n", { mode: 0o755 })
        Fs.writeFileSync(Path.join(dir, "app", "lib", "data.txt"), "nested\n")
        Fs.symlinkSync("lib/data.txt", Path.join(dir, "app", "link"))
        const dockerfile = [
          `FROM ${image}`,
          "ARG WHO=nobody",
          "COPY app/ /srv/app/",
          "RUN echo \"for $WHO\" > /srv/who"
        ]
          .join("\n")
        const built = yield* Effect.promise(() =>
          svc.templates.create({ name: "sdk-dockerfile", dockerfile, context: dir, build_args: { WHO: "sdk" } })
        )
        expect(built).toMatchObject({ state: "ready", image_ref: image })

        const sandbox = yield* Effect.promise(() => svc.sandboxes.create({ template: "sdk-dockerfile" }))
        const seen = yield* Effect.promise(() =>
          sandbox.exec([
            "sh",
            "-c",
            "cat /srv/from-image /srv/who; /srv/app/run.sh; cat /srv/app/lib/data.txt; readlink /srv/app/link"
          ])
        )
        expect(seen.stdout).toBe("image\nfor sdk\nran\nnested\nlib/data.txt\n")
        yield* Effect.promise(() => sandbox.delete())

        // The tar.gz's bytes as the context: the same build, every step from the cache.
        const bytes = execFileSync("tar", ["-czf", "-", "-C", dir, "."])
        const again = yield* Effect.promise(() =>
          svc.templates.create({ name: "sdk-bytes", dockerfile, context: bytes, build_args: { WHO: "sdk" } })
        )
        expect(again.state).toBe("ready")
        expect(yield* Effect.promise(() => svc.templates.logs(again.id))).toMatch(/ cached/)
        Fs.rmSync(dir, { recursive: true, force: true })

        const missing = yield* Effect.promise(() =>
          svc.templates.create({ name: "sdk-missing", dockerfile, context: Path.join(dir, "gone") }).then(
            () => "created",
            (e: Error) => e.message
          )
        )
        expect(missing).toBe(`context: ${Path.join(dir, "gone")} is not a folder`)
      }))
  }
)
