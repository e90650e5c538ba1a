/**
 * The route template a request is counted under (`svc_http_requests_total{route}`): `routeOf`
 * looks a path up by index (exact literal paths, then the templates of the path's first two
 * segments). Its answer must be the plain definition's, for every route the API declares: the
 * template of the path's method with the most literal segments, else one of another method (a
 * 405 is still that route), else `unmatched`.
 */
import { describe, expect, it } from "@effect/vitest"
import { Api } from "@svc/domain/Api"
import { HttpApi } from "effect/http-api"
import { routeOf } from "../../src/Http/Metrics.ts"

interface Declared {
  readonly method: string
  readonly path: string
}

const declared: Array<Declared> = [
  { method: "GET", path: "/v1/openapi.json" },
  { method: "GET", path: "/docs" },
  { method: "GET", path: "/terminal" }
]
HttpApi.reflect(Api, {
  onGroup: () => {},
  onEndpoint: ({ endpoint }) => {
    declared.push({ method: endpoint.method, path: endpoint.path })
  }
})

const segmentsOf = (path: string) => path.split("/").filter((s) => s.length > 0)

/** Whether `path` fits `template` (`:param` one segment, `*` anything, one trailing slash allowed). */
const fits = (template: string, path: string): boolean => {
  const want = segmentsOf(template)
  const got = segmentsOf(path)
  if (path.includes("//")) return false
  for (let i = 0; i < want.length; i++) {
    if (want[i] === "*") return true
    if (i >= got.length) return false
    if (!want[i]!.startsWith(":") && want[i] !== got[i]) return false
  }
  return want.length === got.length
}

/** The definition, without any index. */
const reference = (method: string, url: string): string => {
  const path = url.split("?")[0]!
  const literals = (t: Declared) => segmentsOf(t.path).filter((s) => !s.startsWith(":") && s !== "*").length
  const matching = declared.filter((t) => fits(t.path, path)).sort((a, b) => literals(b) - literals(a))
  const own = matching.find((t) => t.method === method || (method === "HEAD" && t.method === "GET"))
  return own?.path ?? matching[0]?.path ?? "unmatched"
}

/** Paths of each declared route: its parameters filled with ids and with other routes' words. */
const samplePaths = (): Array<string> => {
  const words = [...new Set(declared.flatMap((t) => segmentsOf(t.path)).filter((s) => !s.startsWith(":")))]
  const fillers = ["sbx_0123456789abcdef", "x", ...words]
  const paths = new Set(["/", "/v1", "/v1/", "/nope", "/v1/nope/deeper", "/docs/", "/docs/a/b"])
  for (const t of declared) {
    for (const filler of fillers) {
      const path = t.path.split("/").map((s) => s.startsWith(":") ? filler : s === "*" ? "a/b" : s).join("/")
      for (const variant of [path, `${path}/`, `${path}?token=x`, `${path}/extra`]) paths.add(variant)
    }
  }
  return [...paths]
}

describe("routeOf", () => {
  it("answers the declared template of the path's method", () => {
    expect(routeOf("GET", "/v1/health")).toBe("/v1/health")
    expect(routeOf("GET", "/v1/auth/me?x=1")).toBe("/v1/auth/me")
    expect(routeOf("HEAD", "/v1/auth/me/")).toBe("/v1/auth/me")
    expect(routeOf("POST", "/v1/sandboxes/sbx_1/exec")).toBe("/v1/sandboxes/:id/exec")
    expect(routeOf("GET", "/v1/sandboxes/sbx_1")).toBe("/v1/sandboxes/:id")
    expect(routeOf("GET", "/v1/no-such-thing")).toBe("unmatched")
  })

  it("agrees with the definition for every declared route, method and variant of its path", () => {
    const paths = samplePaths()
    const methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    const differ: Array<string> = []
    for (const path of paths) {
      for (const method of methods) {
        const expected = reference(method, path)
        const got = routeOf(method, path)
        if (got !== expected) differ.push(`${method} ${path}: ${got}, expected ${expected}`)
      }
    }
    expect(differ).toEqual([])
    expect(paths.length * methods.length).toBeGreaterThan(declared.length * 50)
  })
})
