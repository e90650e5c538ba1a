import { describe, expect, it } from "@effect/vitest"
import { Result } from "effect"
import { InvalidScope } from "../src/Errors.ts"
import * as Ids from "../src/Ids.ts"
import * as Scopes from "../src/Scopes.ts"

const grant = (tokens: ReadonlyArray<string>): Scopes.Grant => {
  const r = Scopes.parseScopes(tokens)
  if (Result.isFailure(r)) throw new Error(`expected valid scopes ${JSON.stringify(tokens)}: ${r.failure.error}`)
  return r.success
}
const rejection = (tokens: ReadonlyArray<string>): InvalidScope => {
  const r = Scopes.parseScopes(tokens)
  if (Result.isSuccess(r)) throw new Error(`expected ${JSON.stringify(tokens)} to be rejected`)
  return r.failure
}

const sbx = Ids.makeSandboxId()
const other = Ids.makeSandboxId()

describe("Scopes.parseScopes", () => {
  it("accepts every scope token form of the contract", () => {
    for (const r of Scopes.RESOURCES) {
      for (const a of Scopes.ACTIONS_OF[r]) expect(grant([`${r}:${a}`]).tokens).toEqual([`${r}:${a}`])
      expect(grant([r]).tokens).toEqual([r])
      expect(grant([`${r}:*`]).tokens).toEqual([`${r}:*`])
    }
    expect(grant(["*"]).full).toBe(true)
    expect(grant([`sandbox:${sbx}`]).sandboxId).toBe(sbx)
  })

  it("rejects actions a resource does not list, and sandbox:*", () => {
    for (
      const bad of ["sandboxes:use", "templates:use", "volumes:use", "apps:use", "secrets:delete", "sandboxes:admin"]
    ) {
      const e = rejection([bad])
      expect(e).toBeInstanceOf(InvalidScope)
      expect(e.code).toBe("invalid_scope")
      expect(e.error).toContain(JSON.stringify(bad))
      expect(e.error).toContain("has no action")
    }
    expect(rejection(["sandbox:*"]).error).toContain("sandbox:* is not allowed")
    expect(rejection(["sandboxes:read", "sandbox:*"]).error).toContain("sandbox:*")
  })

  it("rejects malformed tokens, naming them", () => {
    const cases: ReadonlyArray<readonly [string, string]> = [
      ["", "empty"],
      [" *", "malformed"],
      ["* ", "malformed"],
      ["sandboxes:", "missing action"],
      [":read", "missing resource"],
      ["SANDBOXES:read", "malformed"],
      ["sandboxes:read:x", "too many"],
      ["sandbox:", "needs a sandbox id"],
      ["sandbox", "needs a sandbox id"],
      ["sandbox:abc", "is not a sandbox id"],
      [`sandbox:${Ids.makeOrgId()}`, "is not a sandbox id"],
      [`sandbox:${sbx.toUpperCase()}`, "malformed"],
      ["sandboxés:read", "malformed"],
      ["sandboxes:réad", "malformed"],
      ["sandboxes\u0000:read", "malformed"],
      ["widgets:read", "unknown resource"],
      ["widgets", "unknown resource"],
      ["*:read", "unknown resource"],
      ["**", "unknown resource"],
      ["sandboxes:**", "has no action"],
      ["x".repeat(10_000), "longer than"]
    ]
    for (const [token, why] of cases) {
      const e = rejection(["sandboxes:read", token])
      expect(e.error, token).toContain(why)
      expect(e.error.length).toBeLessThan(400)
    }
  })

  it("rejects an empty list, too many tokens, and two different sandboxes", () => {
    expect(rejection([]).error).toContain("must not be empty")
    expect(rejection(Array.from({ length: 65 }, () => "apps:read")).error).toContain("at most 64")
    expect(rejection([`sandbox:${sbx}`, `sandbox:${other}`]).error).toContain("one sandbox only")
    expect(rejection(["*", `sandbox:${sbx}`]).error).toContain("cannot be combined")
    expect(rejection([42 as unknown as string]).error).toContain("strings")
  })

  it("dedupes tokens, keeping first-seen order", () => {
    expect(grant(["apps:read", "*", "apps:read", "*"]).tokens).toEqual(["apps:read", "*"])
    expect(grant([`sandbox:${sbx}`, `sandbox:${sbx}`]).tokens).toEqual([`sandbox:${sbx}`])
  })
})

describe("Scopes.allows", () => {
  it("* allows everything and is the only full access", () => {
    const g = grant(["*"])
    expect(Scopes.isFullAccess(g)).toBe(true)
    expect(Scopes.isFullAccess(Scopes.FULL_ACCESS)).toBe(true)
    for (const r of Scopes.RESOURCES) {
      for (const a of Scopes.ACTIONS_OF[r]) expect(Scopes.allows(g, r, a as never)).toBe(true)
    }
    expect(Scopes.isFullAccess(grant(["sandboxes", "templates", "volumes", "apps", "secrets"]))).toBe(false)
    expect(Scopes.isFullAccess(grant([`sandbox:${sbx}`]))).toBe(false)
  })

  it("read is read-only; write implies read", () => {
    const r = grant(["sandboxes:read"])
    expect(Scopes.allows(r, "sandboxes", "read")).toBe(true)
    expect(Scopes.allows(r, "sandboxes", "write")).toBe(false)
    expect(Scopes.allows(r, "templates", "read")).toBe(false)
    const w = grant(["templates:write"])
    expect(Scopes.allows(w, "templates", "read")).toBe(true)
    expect(Scopes.allows(w, "templates", "write")).toBe(true)
    expect(Scopes.allows(w, "sandboxes", "read")).toBe(false)
  })

  it("secrets scopes follow the contract: write does not grant use", () => {
    const write = grant(["secrets:write"])
    expect(Scopes.allows(write, "secrets", "read")).toBe(true)
    expect(Scopes.allows(write, "secrets", "write")).toBe(true)
    expect(Scopes.allows(write, "secrets", "use")).toBe(false)
    const use = grant(["secrets:use"])
    expect(Scopes.allows(use, "secrets", "use")).toBe(true)
    expect(Scopes.allows(use, "secrets", "read")).toBe(false)
    expect(Scopes.allows(use, "secrets", "write")).toBe(false)
    const readOnly = grant(["secrets:read"])
    expect(Scopes.allows(readOnly, "secrets", "write")).toBe(false)
    expect(Scopes.allows(readOnly, "secrets", "use")).toBe(false)
    const both = grant(["secrets:write", "secrets:use"])
    expect(Scopes.allows(both, "secrets", "write") && Scopes.allows(both, "secrets", "use")).toBe(true)
  })

  it("<resource> and <resource>:* grant every listed action, including use", () => {
    for (const tokens of [["secrets"], ["secrets:*"]]) {
      const g = grant(tokens)
      for (const a of ["read", "write", "use"] as const) expect(Scopes.allows(g, "secrets", a)).toBe(true)
      expect(Scopes.allows(g, "apps", "read")).toBe(false)
    }
    const s = grant(["sandboxes:*"])
    expect(Scopes.allows(s, "sandboxes", "write")).toBe(true)
  })

  it("maps methods to actions and names the required scope", () => {
    expect(Scopes.requiredAction("GET")).toBe("read")
    expect(Scopes.requiredAction("HEAD")).toBe("read")
    expect(Scopes.requiredAction("head")).toBe("read")
    for (const m of ["POST", "PUT", "PATCH", "DELETE", "OPTIONS", "WHATEVER"]) {
      expect(Scopes.requiredAction(m)).toBe("write")
    }
    expect(Scopes.requiredScope("secrets", "use")).toBe("secrets:use")
  })
})

describe("Scopes of a sandbox key (the single-sandbox scope)", () => {
  const confined = grant([`sandbox:${sbx}`])

  it("gives a sandbox key sandboxes read and write, and nothing else", () => {
    expect(Scopes.sandboxScopeOf(confined)).toBe(sbx)
    expect(Scopes.allows(confined, "sandboxes", "read")).toBe(true)
    expect(Scopes.allows(confined, "sandboxes", "write")).toBe(true)
    for (const r of ["templates", "volumes", "apps", "secrets"] as const) {
      expect(Scopes.allows(confined, r, "read")).toBe(false)
    }
    const plus = grant([`sandbox:${sbx}`, "templates:read", "secrets:use"])
    expect(Scopes.allows(plus, "templates", "read")).toBe(true)
    expect(Scopes.allows(plus, "templates", "write")).toBe(false)
    expect(Scopes.allows(plus, "secrets", "use")).toBe(true)
    expect(Scopes.allows(plus, "volumes", "read")).toBe(false)
    expect(Scopes.sandboxScopeOf(plus)).toBe(sbx)
    // A sandboxes token beside the confinement does not lift it.
    expect(Scopes.sandboxScopeOf(grant([`sandbox:${sbx}`, "sandboxes"]))).toBe(sbx)
  })
})
