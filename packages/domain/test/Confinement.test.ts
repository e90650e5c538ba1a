/**
 * The `sandbox:<id>` confinement rule against written-out tables: which sandboxes a confined key
 * reaches (the predicate, the routes' decision and the event filter alike), what it may create,
 * and its egress ceiling. The SQL form is checked against the same predicate on a real Postgres in
 * packages/sandboxes/test/Confinement.test.ts.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Result } from "effect"
import * as Confinement from "../src/Confinement.ts"
import * as Ids from "../src/Ids.ts"
import * as Scopes from "../src/Scopes.ts"

const grant = (tokens: ReadonlyArray<string>): Scopes.Grant => {
  const r = Scopes.parseScopes(tokens)
  if (Result.isFailure(r)) throw new Error(`expected valid scopes ${JSON.stringify(tokens)}: ${r.failure.error}`)
  return r.success
}

const sbx = Ids.makeSandboxId()
const child = Ids.makeSandboxId()
const other = Ids.makeSandboxId()
const grandchild = Ids.makeSandboxId()

/** [the sandbox (id, parent), whether a key confined to `sbx` reaches it] */
const REACH: ReadonlyArray<readonly [string, { readonly id: string; readonly parentId: string | null }, boolean]> = [
  ["the sandbox itself, a root", { id: sbx, parentId: null }, true],
  ["the sandbox itself, a child of another", { id: sbx, parentId: other }, true],
  ["a direct child", { id: child, parentId: sbx }, true],
  ["a grandchild", { id: grandchild, parentId: child }, false],
  ["another root", { id: other, parentId: null }, false],
  ["its parent's other child (a sibling)", { id: child, parentId: other }, false],
  ["another's child", { id: other, parentId: Ids.makeSandboxId() }, false]
]

describe("Confinement (the single-sandbox scope)", () => {
  const confined = grant([`sandbox:${sbx}`])

  it("reaches the scoped sandbox and its direct children only: predicate and route decision", () => {
    expect(REACH.map(([what, s]) => [what, Confinement.confines(sbx, s)])).toEqual(
      REACH.map(([what, , reached]) => [what, reached])
    )
    expect(REACH.map(([what, s]) => [what, Confinement.sandboxAccess(confined, s)._tag])).toEqual(
      REACH.map(([what, , reached]) => [what, reached ? "Allowed" : "Denied"])
    )
  })

  it.effect("shows a confined key the events of the sandboxes it reaches, and no event without a sandbox", () =>
    Effect.gen(function*() {
      for (const [what, s, reached] of REACH) {
        // The lookup is asked for the event's sandbox only.
        const parentOf = (id: string) => Effect.succeed(id === s.id ? s.parentId : `asked for ${id}`)
        expect([what, yield* Confinement.eventVisible(sbx, { sandbox_id: s.id }, parentOf)]).toEqual([what, reached])
      }
      const asked: Array<string> = []
      const lookup = (id: string) => Effect.sync(() => (asked.push(id), null))
      expect(yield* Confinement.eventVisible(sbx, { sandbox_id: sbx }, lookup)).toBe(true)
      expect(asked).toEqual([])
      expect(yield* Confinement.eventVisible(sbx, { template_id: "tpl_x" }, lookup)).toBe(false)
      expect(yield* Confinement.eventVisible(null, { sandbox_id: other }, lookup)).toBe(true)
    }))

  it("allows the scoped sandbox and its direct children only (cases named one by one)", () => {
    expect(Confinement.sandboxAccess(confined, { id: sbx, parentId: null })._tag).toBe("Allowed")
    expect(Confinement.sandboxAccess(confined, { id: sbx, parentId: other })._tag).toBe("Allowed")
    expect(Confinement.sandboxAccess(confined, { id: child, parentId: sbx })._tag).toBe("Allowed")
    const grandchild = Confinement.sandboxAccess(confined, { id: Ids.makeSandboxId(), parentId: child })
    expect(grandchild).toEqual({ _tag: "Denied", code: "sandbox_out_of_scope" })
    expect(Confinement.sandboxAccess(confined, { id: other, parentId: null })._tag).toBe("Denied")
    expect(Confinement.sandboxAccess(confined, { id: other, parentId: other })._tag).toBe("Denied")
    // The scoped sandbox's parent and siblings are out of scope.
    expect(Confinement.sandboxAccess(confined, { id: other, parentId: Ids.makeSandboxId() })._tag).toBe("Denied")
  })

  it("creates as a child of the scoped sandbox", () => {
    expect(Confinement.sandboxAccess(confined, { create: { parentId: null } })).toEqual({
      _tag: "CreateAs",
      parentId: sbx
    })
    expect(Confinement.sandboxAccess(confined, { create: { parentId: sbx } })).toEqual({
      _tag: "CreateAs",
      parentId: sbx
    })
    expect(Confinement.sandboxAccess(confined, { create: { parentId: child } })._tag).toBe("Denied")
    expect(Confinement.sandboxAccess(confined, { create: { parentId: other } })._tag).toBe("Denied")
  })

  it("leaves unconfined grants to their scopes", () => {
    for (const g of [grant(["*"]), grant(["sandboxes:read"]), grant(["apps"])]) {
      expect(Scopes.sandboxScopeOf(g)).toBeNull()
      expect(Confinement.sandboxAccess(g, { id: other, parentId: child })._tag).toBe("Allowed")
      expect(Confinement.sandboxAccess(g, { create: { parentId: other } })._tag).toBe("Allowed")
    }
  })
})

describe("Confinement egress ceiling (a sandbox key's network policy)", () => {
  const confined = grant([`sandbox:${sbx}`])
  const ceiling = { allow_out: ["*.example.com", "203.0.113.0/24", "2001:db8::/32"], deny_out: ["evil.example.com"] }

  it("covers a rule by the same rule, a name under a *. rule, a CIDR inside a CIDR of its family", () => {
    const covered: ReadonlyArray<readonly [string, string, boolean]> = [
      ["*.example.com", "*.example.com", true],
      ["*.example.com", "api.example.com", true],
      ["*.example.com", "a.b.example.com", true],
      ["*.example.com", "*.api.example.com", true],
      ["*.example.com", "example.com", false],
      ["*.example.com", "*.com", false],
      ["*.example.com", "badexample.com", false],
      ["api.example.com", "x.api.example.com", false],
      ["203.0.113.0/24", "203.0.113.8/29", true],
      ["203.0.113.0/24", "203.0.113.9", true],
      ["203.0.113.0/24", "203.0.112.0/23", false],
      ["203.0.113.0/24", "203.0.114.1", false],
      ["2001:db8::/32", "2001:db8:1::/48", true],
      ["2001:db8::/32", "2001:db9::/48", false],
      ["203.0.113.0/24", "2001:db8::/48", false],
      ["*.example.com", "203.0.113.1", false],
      ["203.0.113.0/24", "api.example.com", false]
    ]
    expect(covered.map(([outer, inner]) => [outer, inner, Confinement.ruleCovers(outer, inner)])).toEqual(covered)
  })

  it("a confined key may only narrow: every deny kept, allow within the ceiling's when it has one", () => {
    const update = (allow_out: Array<string>, deny_out: Array<string>) =>
      Confinement.egressUpdate(confined, { allow_out, deny_out }, ceiling)._tag
    expect(update(["api.example.com"], ["evil.example.com", "more.example.com"])).toBe("Allowed")
    expect(update(ceiling.allow_out, ceiling.deny_out)).toBe("Allowed")
    expect(update([], ceiling.deny_out)).toBe("Denied")
    expect(update(["api.example.com"], [])).toBe("Denied")
    expect(update(["api.example.com", "pypi.org"], ceiling.deny_out)).toBe("Denied")
    // An open ceiling (no allow_out) keeps only its deny rules.
    const open = { allow_out: [], deny_out: ["1.2.3.4"] }
    expect(Confinement.egressUpdate(confined, { allow_out: [], deny_out: ["1.2.3.4"] }, open)._tag).toBe("Allowed")
    expect(Confinement.egressUpdate(confined, { allow_out: ["pypi.org"], deny_out: [] }, open)._tag).toBe("Denied")
    // Unconfined grants are held to their scopes only.
    expect(Confinement.egressUpdate(grant(["*"]), { allow_out: [], deny_out: [] }, ceiling)._tag).toBe("Allowed")
  })

  it("a confined key's child starts from the ceiling: deny rules add, allow rules narrow", () => {
    const child = (allow_out: Array<string>, deny_out: Array<string>) =>
      Confinement.egressOfChild(confined, { allow_out, deny_out }, ceiling)
    expect(child([], [])).toEqual({ _tag: "Allowed", policy: ceiling })
    expect(child([], ["x.example.com", "evil.example.com"])).toEqual({
      _tag: "Allowed",
      policy: { allow_out: ceiling.allow_out, deny_out: ["evil.example.com", "x.example.com"] }
    })
    expect(child(["api.example.com"], [])).toEqual({
      _tag: "Allowed",
      policy: { allow_out: ["api.example.com"], deny_out: ["evil.example.com"] }
    })
    expect(child(["0.0.0.0/0"], [])._tag).toBe("Denied")
    const full = { allow_out: [], deny_out: Array.from({ length: 100 }, (_, i) => `h${i}.example.com`) }
    expect(Confinement.egressOfChild(confined, { allow_out: [], deny_out: ["one.more.example.com"] }, full)._tag).toBe(
      "Denied"
    )
    expect(Confinement.egressOfChild(grant(["*"]), { allow_out: [], deny_out: [] }, ceiling)).toEqual({
      _tag: "Allowed",
      policy: { allow_out: [], deny_out: [] }
    })
  })
})
