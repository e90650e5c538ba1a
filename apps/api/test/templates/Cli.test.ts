/**
 * The CLI's template commands and `svc sandbox snapshot` against the real API and agent (the
 * CLI a process of its own, as a user runs it): a template built from a JSON file with its log
 * followed, listed, read, its log printed, used by a sandbox, snapshotted, refused deletion while
 * in use, deleted; a failing build and a bad file exit 1 with the reason.
 */
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import * as FsSync from "node:fs"
import * as Os from "node:os"
import * as NodePath from "node:path"
import { Env, EnvLayer } from "../../testing/SandboxesEnv.ts"
import { runSvc } from "../support/Cli.ts"

const svc = (args: ReadonlyArray<string>) =>
  Effect.flatMap(Effect.service(Env), (env) => runSvc({ base: env.base, token: env.org.token }, args))

const file = (name: string, content: string) => {
  const dir = FsSync.mkdtempSync(NodePath.join(Os.tmpdir(), "svc-cli-template-"))
  const path = NodePath.join(dir, name)
  FsSync.writeFileSync(path, content)
  return path
}

layer(EnvLayer, { excludeTestServices: true, timeout: 300_000 })("svc template, svc sandbox snapshot", (it) => {
  it.effect(
    "builds from a file (log followed), lists, gets, prints the log, used by a sandbox, snapshot, delete",
    () =>
      Effect.gen(function*() {
        const spec = file(
          "web.json",
          JSON.stringify({
            name: "cli-web",
            steps: [
              { file: { path: "/srv/index.html", content: "<h1>from the cli</h1>\n" } },
              { env: { PORT: "8080" } },
              { run: "echo built on $PORT > /srv/built" }
            ],
            start_cmd: "while true; do sleep 1; done"
          })
        )
        const built = yield* svc(["template", "create", "--file", spec, "--wait", "--json"])
        expect(built.code, built.stderr).toBe(0)
        const template = JSON.parse(built.stdout)
        expect(template).toMatchObject({ name: "cli-web", state: "ready", base: "base" })
        expect(template.image).toMatch(/^sha256:[0-9a-f]{64}$/)
        // The log went to stderr as it ran.
        expect(built.stderr).toMatch(/step 3\/3 run: echo built on \$PORT/)

        const listed = yield* svc(["template", "list"])
        expect(listed.code, listed.stderr).toBe(0)
        expect(listed.stdout).toContain(`${template.id}  cli-web  ready  base=base  ${template.image}`)
        const got = yield* svc(["template", "get", "cli-web"])
        expect(got.stdout.trim()).toBe(`${template.id}  cli-web  ready  base=base  ${template.image}`)
        const log = yield* svc(["template", "logs", template.id])
        expect(log.code, log.stderr).toBe(0)
        expect(log.stdout).toMatch(/step 1\/3 file: \/srv\/index\.html/)
        expect(log.stdout).toMatch(/ready in/)

        const created = yield* svc(["sandbox", "create", "--template", "cli-web", "--wait"])
        expect(created.code, created.stderr).toBe(0)
        const sandbox = JSON.parse(created.stdout)
        expect(sandbox).toMatchObject({ state: "running", templateId: template.id })
        const ran = yield* svc(["sandbox", "exec", sandbox.id, "--", "sh", "-c", "cat /srv/built; echo $PORT"])
        expect(ran.stdout).toBe("built on 8080\n8080\n")

        // In use: refused.
        const refused = yield* svc(["template", "delete", "cli-web"])
        expect(refused.code).toBe(1)
        expect(refused.stderr).toMatch(/^error conflict: Template cli-web is used by sandbox sbx_/)

        yield* svc(["sandbox", "exec", sandbox.id, "--", "sh", "-c", "echo changed > /srv/built"])
        const snap = yield* svc(["sandbox", "snapshot", sandbox.id, "--name", "cli-snap", "--wait", "--json"])
        expect(snap.code, snap.stderr).toBe(0)
        expect(JSON.parse(snap.stdout)).toMatchObject({ name: "cli-snap", state: "ready", base: template.id })
        const copy = JSON.parse((yield* svc(["sandbox", "create", "--template", "cli-snap", "--wait"])).stdout)
        expect((yield* svc(["sandbox", "exec", copy.id, "--", "cat", "/srv/built"])).stdout).toBe("changed\n")

        for (const id of [sandbox.id, copy.id]) yield* svc(["sandbox", "delete", id])
        const gone = yield* Effect.gen(function*() {
          for (;;) {
            const answer = yield* svc(["template", "delete", "cli-snap"])
            if (answer.code === 0 || !answer.stderr.includes("conflict")) return answer
            yield* Effect.sleep("300 millis")
          }
        })
        expect(gone.stdout.trim()).toBe(`${JSON.parse(snap.stdout).id} deleted`)
        const missing = yield* svc(["template", "get", "cli-snap"])
        expect(missing.code).toBe(1)
        expect(missing.stderr).toBe("error not_found: Template not found\n")
      }),
    240_000
  )

  it.effect(
    "a failing build exits 1 with its reason; a file that is not JSON and a bad body are refused",
    () =>
      Effect.gen(function*() {
        const failing = file("bad.json", JSON.stringify({ name: "cli-fails", steps: [{ run: "echo no; exit 3" }] }))
        const failed = yield* svc(["template", "create", "-f", failing, "--wait"])
        expect(failed.code).toBe(1)
        expect(failed.stdout).toMatch(/cli-fails {2}failed {2}base=base {2}step 1\/1 \(run\) exited with code 3/)
        expect(failed.stderr).toContain("build failed: step 1/1 (run) exited with code 3")

        const notJson = yield* svc(["template", "create", "--file", file("t.yaml", "name: x\n")])
        expect(notJson.code).toBe(1)
        expect(notJson.stderr).toMatch(/^cannot read .*t\.yaml: /)
        const badBody = yield* svc(["template", "create", "--file", file("t.json", "{\"name\": \"\"}")])
        expect(badBody.code).toBe(1)
        expect(badBody.stderr).toMatch(/^error invalid_request: /)
        // --name over the file's.
        const renamed = yield* svc(["template", "create", "--file", file("t.json", "{\"name\": \"\"}"), "--name", "ok"])
        expect(renamed.code, renamed.stderr).toBe(0)
        expect(renamed.stdout).toMatch(/^tpl_\w+ {2}ok {2}building {2}base=base {2}-\n$/)
      }),
    240_000
  )
})
