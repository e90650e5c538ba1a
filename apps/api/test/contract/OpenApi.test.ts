/**
 * The OWASP API Security ruleset (Spectral, `.spectral.yaml` at the root) over the API's OpenAPI
 * document, offline: zero errors, or the test fails naming each (issue 25). The document is the
 * one /v1/openapi.json serves (`OpenApi.fromApi` of the same `Api`), written to
 * .svc/openapi.json, the path `.spectral.yaml`'s overrides name.
 */
import { describe, expect, it } from "@effect/vitest"
import { Api } from "@svc/domain/Api"
import { OpenApi } from "effect/http-api"
import { execFile } from "node:child_process"
import { mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { join, resolve } from "node:path"

const ROOT = resolve(import.meta.dirname, "../../../..")
const SPECTRAL = join(ROOT, "node_modules", ".bin", "spectral")
/** The ruleset `.spectral.yaml` extends, as installed (devDependencies of the root). */
const RULESET = join(ROOT, "node_modules/@stoplight/spectral-owasp-ruleset/package.json")

interface Finding {
  readonly code: string
  readonly severity: number
  readonly message: string
  readonly path: ReadonlyArray<string | number>
}

/** Spectral's findings on `doc`, written to .svc/`name` (0: error, 1: warning, ...). */
const lint = (doc: unknown, name: string) => {
  mkdirSync(join(ROOT, ".svc"), { recursive: true })
  writeFileSync(join(ROOT, ".svc", name), JSON.stringify(doc))
  return new Promise<ReadonlyArray<Finding>>((done, fail) =>
    execFile(
      SPECTRAL,
      ["lint", "--ruleset", ".spectral.yaml", "--format", "json", "--quiet", join(".svc", name)],
      { cwd: ROOT, maxBuffer: 64 * 1024 * 1024 },
      (error, stdout, stderr) => {
        // Spectral exits 1 when it finds errors; anything but its JSON is a failure of the check.
        try {
          done(JSON.parse(stdout) as ReadonlyArray<Finding>)
        } catch {
          fail(new Error(`spectral did not answer with its findings: ${error?.message ?? ""}\n${stderr}\n${stdout}`))
        }
      }
    )
  )
}

const errorsOf = (findings: ReadonlyArray<Finding>) =>
  findings.filter((f) => f.severity === 0).map((f) => `${f.code} at ${f.path.join(".")}: ${f.message}`)

describe("the OpenAPI document under the OWASP API Security ruleset", () => {
  it("has no error", async () => {
    // The ruleset is there to extend: without it Spectral would not run the OWASP rules at all.
    expect(JSON.parse(readFileSync(RULESET, "utf8")).name).toBe("@stoplight/spectral-owasp-ruleset")
    expect(readFileSync(join(ROOT, ".spectral.yaml"), "utf8")).toContain("- \"@stoplight/spectral-owasp-ruleset\"")
    const findings = await lint(OpenApi.fromApi(Api), "openapi.json")
    expect(errorsOf(findings)).toEqual([])
  }, 120_000)

  it(
    "the check finds what it is there for: an unbounded string, an unbounded array, a credential in a URL",
    async () => {
      const doc = OpenApi.fromApi(Api) as Record<string, any>
      const body = doc.paths["/v1/templates"].post.requestBody.content["application/json"].schema
      const schema = body.$ref === undefined ? body : doc.components.schemas[body.$ref.split("/").pop()]
      delete schema.properties.name.maxLength
      delete schema.properties.name.pattern
      schema.properties.steps = { type: "array", items: schema.properties.steps.items }
      doc.paths["/v1/templates"].get.parameters.push({ name: "api_key", in: "query", schema: { type: "string" } })
      const errors = errorsOf(await lint(doc, "openapi-broken.json"))
      for (const code of ["string-limit", "array-limit", "no-credentials-in-url"]) {
        expect(errors.some((e) => e.includes(code)), errors.join("\n")).toBe(true)
      }
    },
    120_000
  )
})
