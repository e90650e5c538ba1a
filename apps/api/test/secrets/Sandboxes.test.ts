/**
 * A sandbox's egress settings through the real API (docs/contract.md#snapshots-network-policy-and-exposed-ports): `network`
 * and `secrets` at create, PUT .../network, POST .../secrets, shown on the record, and the
 * `egress` KV entry `sandbox.<id>` the hosts' proxies read, after every change: read back from
 * NATS. A deleted secret leaves every sandbox it was bound to; a deleted sandbox's entry goes.
 * The key injected into a sandbox (`sandbox:<id>`) cannot lift its sandbox's policy nor give a
 * child more (issue 25, item 13): the sandbox's policy is its ceiling.
 * No host runs here: the sandboxes stay `pending` (no runtime), which every route accepts.
 */
import { expect, layer } from "@effect/vitest"
import { SandboxEgress } from "@svc/host-protocol/Egress"
import { Effect, Schema } from "effect"
import { randomBytes } from "node:crypto"
import { egressUntil, request, Stack, StackLayer } from "./Secrets.support.ts"

const decodeEntry = (text: string | null) => Schema.decodeUnknownSync(SandboxEgress)(JSON.parse(text!))

const entryIs = (expected: { policy: unknown; secretIds: ReadonlyArray<string> }) => (text: string | null) => {
  if (text === null) return false
  const entry = decodeEntry(text)
  return JSON.stringify(entry.policy) === JSON.stringify(expected.policy) &&
    JSON.stringify(entry.secretIds) === JSON.stringify(expected.secretIds)
}

const newSecret = (token: string) =>
  Effect.gen(function*() {
    const { base } = yield* Stack
    const value = `v-${randomBytes(12).toString("hex")}`
    const res = yield* request(base, token, "POST", "/v1/secrets", {
      name: `s-${randomBytes(6).toString("hex")}`,
      value,
      allowed_hosts: ["api.example.com"]
    })
    expect(res.status).toBe(201)
    return { id: res.body.id as string, value }
  })

/** No agent serves this stack: its sandboxes ask for a region none serves (created, then error). */
const NOWHERE = "nowhere"

layer(StackLayer, { timeout: 120_000, excludeTestServices: true })("Sandbox egress", (it) => {
  it.effect("network and secrets at create: on the record and in the sandbox's KV entry", () =>
    Effect.gen(function*() {
      const { a, base, key, logs } = yield* Stack
      const star = (yield* key(a, ["*"])).token
      const s1 = yield* newSecret(star)
      const s2 = yield* newSecret(star)
      const created = yield* request(base, star, "POST", "/v1/sandboxes", {
        region: NOWHERE,
        secrets: [s2.id, s1.id],
        network: { allow_out: ["PyPI.org", "*.pythonhosted.org", "203.0.113.0/24"], deny_out: ["198.51.100.7"] }
      })
      expect(created.status).toBe(201)
      const policy = {
        allow_out: ["pypi.org", "*.pythonhosted.org", "203.0.113.0/24"],
        deny_out: ["198.51.100.7"]
      }
      expect(created.body.network).toEqual(policy)
      expect(created.body.secrets).toEqual([s2.id, s1.id])
      const id = created.body.id as string
      const got = yield* request(base, star, "GET", `/v1/sandboxes/${id}`)
      expect(got.body.network).toEqual(policy)
      expect(got.body.secrets).toEqual([s2.id, s1.id])
      const listed = yield* request(base, star, "GET", "/v1/sandboxes?limit=500")
      expect(listed.body.rows.find((r: { id: string }) => r.id === id).secrets).toEqual([s2.id, s1.id])

      const text = yield* egressUntil(`sandbox.${id}`, (t) => t !== null)
      expect(decodeEntry(text)).toEqual({ sandboxId: id, orgId: a.id, policy, secretIds: [s2.id, s1.id] })
      // Metadata ids only, anywhere.
      for (const res of [created, got, listed]) {
        expect(res.text.includes(s1.value) || res.text.includes(s2.value)).toBe(false)
      }
      expect(text!.includes(s1.value)).toBe(false)
      expect(logs.join("\n").includes(s1.value)).toBe(false)

      // Without either: an open policy and no secrets, published all the same.
      const plain = yield* request(base, star, "POST", "/v1/sandboxes", { region: NOWHERE })
      expect(plain.body.network).toEqual({ allow_out: [], deny_out: [] })
      expect(plain.body.secrets).toEqual([])
      yield* egressUntil(
        `sandbox.${plain.body.id}`,
        entryIs({ policy: { allow_out: [], deny_out: [] }, secretIds: [] })
      )
    }))

  it.effect("PUT network replaces the policy (record and KV); bad rules are 400 naming each; deleted is 409", () =>
    Effect.gen(function*() {
      const { a, base, key } = yield* Stack
      const star = (yield* key(a, ["*"])).token
      const id = (yield* request(base, star, "POST", "/v1/sandboxes", {
        region: NOWHERE,
        network: { deny_out: ["10.9.0.0/16"] }
      })).body
        .id as string
      const put = yield* request(base, star, "PUT", `/v1/sandboxes/${id}/network`, {
        allow_out: ["example.com", "2001:db8::/32"]
      })
      expect(put.status).toBe(200)
      // A PUT replaces: the omitted deny_out is now empty.
      expect(put.body.network).toEqual({ allow_out: ["example.com", "2001:db8::/32"], deny_out: [] })
      expect(put.body.id).toBe(id)
      yield* egressUntil(
        `sandbox.${id}`,
        entryIs({ policy: { allow_out: ["example.com", "2001:db8::/32"], deny_out: [] }, secretIds: [] })
      )
      const cleared = yield* request(base, star, "PUT", `/v1/sandboxes/${id}/network`, {})
      expect(cleared.body.network).toEqual({ allow_out: [], deny_out: [] })
      yield* egressUntil(`sandbox.${id}`, entryIs({ policy: { allow_out: [], deny_out: [] }, secretIds: [] }))

      const bad = yield* request(base, star, "PUT", `/v1/sandboxes/${id}/network`, {
        allow_out: ["ok.example.com", "exa mple.com", "10.0.0.0/40"],
        deny_out: ["*"]
      })
      expect(bad.status).toBe(400)
      expect(bad.body.code).toBe("invalid_request")
      expect(bad.body.issues.map((i: { path: string }) => i.path).sort()).toEqual([
        "allow_out.1",
        "allow_out.2",
        "deny_out.0"
      ])
      const badCreate = yield* request(base, star, "POST", "/v1/sandboxes", {
        region: NOWHERE,
        network: { allow_out: ["a.*.com"] }
      })
      expect(badCreate.status).toBe(400)
      expect(badCreate.body.issues.map((i: { path: string }) => i.path)).toEqual(["network.allow_out.0"])
      const tooMany = yield* request(base, star, "PUT", `/v1/sandboxes/${id}/network`, {
        deny_out: Array.from({ length: 101 }, (_, i) => `h${i}.example.com`)
      })
      expect(tooMany.status).toBe(400)

      // Another org's sandbox: 404; a sandbox key on another sandbox: 403.
      const other = (yield* key((yield* Stack).b, ["*"])).token
      expect((yield* request(base, other, "PUT", `/v1/sandboxes/${id}/network`, {})).status).toBe(404)
      const sibling = (yield* request(base, star, "POST", "/v1/sandboxes", { region: NOWHERE })).body.id as string
      const confined = (yield* key(a, [`sandbox:${sibling}`])).token
      const outOfScope = yield* request(base, confined, "PUT", `/v1/sandboxes/${id}/network`, {})
      expect(outOfScope.status).toBe(403)
      expect(outOfScope.body.code).toBe("sandbox_out_of_scope")
      expect((yield* request(base, confined, "PUT", `/v1/sandboxes/${sibling}/network`, {})).status).toBe(200)

      // Deleted (pending: at once): its entry goes, and changes are refused.
      const deleted = yield* request(base, star, "DELETE", `/v1/sandboxes/${id}`)
      expect(deleted.body.state).toBe("deleted")
      yield* egressUntil(`sandbox.${id}`, (t) => t === null)
      const late = yield* request(base, star, "PUT", `/v1/sandboxes/${id}/network`, { allow_out: ["example.com"] })
      expect(late.status).toBe(409)
      const s = yield* newSecret(star)
      expect((yield* request(base, star, "POST", `/v1/sandboxes/${id}/secrets`, { secret_id: s.id })).status)
        .toBe(409)
      // Nothing put the entry back.
      expect(yield* (yield* Stack).egress(`sandbox.${id}`)).toBeNull()
    }))

  it.effect("a sandbox:<id> key: its sandbox's policy is a ceiling it cannot lift, its children start from it and only narrow it", () =>
    Effect.gen(function*() {
      const { a, base, key } = yield* Stack
      const star = (yield* key(a, ["*"])).token
      const ceiling = { allow_out: ["*.example.com", "203.0.113.0/24"], deny_out: ["evil.example.com"] }
      const parent = (yield* request(base, star, "POST", "/v1/sandboxes", { region: NOWHERE, network: ceiling })).body
        .id as string
      // The key a caller mints and injects into the sandbox, in the hands of what runs there.
      const injected = (yield* key(a, [`sandbox:${parent}`])).token
      const put = (id: string, body: unknown, token = injected) =>
        request(base, token, "PUT", `/v1/sandboxes/${id}/network`, body)
      const refused = (res: { status: number; body: any; text: string }, mentions: string) => {
        expect(res.status, res.text).toBe(403)
        expect(res.body.code).toBe("egress_beyond_ceiling")
        expect(res.body.error).toContain(mentions)
      }

      // Lifting its own sandbox's policy, whole or in part: 403, nothing changed.
      refused(yield* put(parent, { allow_out: [] }), "deny_out must keep \"evil.example.com\"")
      refused(yield* put(parent, { allow_out: [], deny_out: ceiling.deny_out }), "allow_out cannot be empty")
      refused(yield* put(parent, {}), "evil.example.com")
      refused(yield* put(parent, { allow_out: ceiling.allow_out }), "deny_out must keep")
      refused(yield* put(parent, { ...ceiling, allow_out: ["*.example.com", "0.0.0.0/0"] }), "0.0.0.0/0")
      refused(yield* put(parent, { ...ceiling, allow_out: ["example.com"] }), "example.com")
      refused(yield* put(parent, { ...ceiling, allow_out: ["*.com"] }), "*.com")
      refused(yield* put(parent, { ...ceiling, allow_out: ["203.0.112.0/23"] }), "203.0.112.0/23")
      expect((yield* request(base, star, "GET", `/v1/sandboxes/${parent}`)).body.network).toEqual(ceiling)
      yield* egressUntil(`sandbox.${parent}`, entryIs({ policy: ceiling, secretIds: [] }))

      // Children: without a policy, the parent's; asking for open egress gets the parent's too;
      // deny rules add, allow rules narrow; anything wider is 403 and creates nothing.
      const child = (network?: unknown) =>
        request(
          base,
          injected,
          "POST",
          "/v1/sandboxes",
          network === undefined ? { region: NOWHERE } : { region: NOWHERE, network }
        )
      const plain = yield* child()
      expect(plain.status, plain.text).toBe(201)
      expect(plain.body.parentId).toBe(parent)
      expect(plain.body.network).toEqual(ceiling)
      yield* egressUntil(`sandbox.${plain.body.id}`, entryIs({ policy: ceiling, secretIds: [] }))
      const open = yield* child({ allow_out: [], deny_out: [] })
      expect(open.body.network).toEqual(ceiling)
      const added = yield* child({ deny_out: ["x.example.com", "evil.example.com"] })
      expect(added.body.network).toEqual({
        allow_out: ceiling.allow_out,
        deny_out: ["evil.example.com", "x.example.com"]
      })
      const narrowed = yield* child({ allow_out: ["api.example.com", "*.cdn.example.com", "203.0.113.8/29"] })
      expect(narrowed.status, narrowed.text).toBe(201)
      expect(narrowed.body.network).toEqual({
        allow_out: ["api.example.com", "*.cdn.example.com", "203.0.113.8/29"],
        deny_out: ["evil.example.com"]
      })
      const before = (yield* request(base, star, "GET", "/v1/sandboxes?limit=500")).body.total as number
      refused(yield* child({ allow_out: ["pypi.org"] }), "pypi.org")
      refused(yield* child({ allow_out: ["api.example.com", "198.51.100.0/24"] }), "198.51.100.0/24")
      expect((yield* request(base, star, "GET", "/v1/sandboxes?limit=500")).body.total).toBe(before)

      // A child's policy is held to the same ceiling: lifted 403, narrowed 200.
      const childId = plain.body.id as string
      refused(yield* put(childId, { allow_out: [], deny_out: ceiling.deny_out }), "allow_out cannot be empty")
      const narrowedChild = yield* put(childId, { allow_out: ["api.example.com"], deny_out: ["evil.example.com"] })
      expect(narrowedChild.status, narrowedChild.text).toBe(200)
      yield* egressUntil(
        `sandbox.${childId}`,
        entryIs({ policy: { allow_out: ["api.example.com"], deny_out: ["evil.example.com"] }, secretIds: [] })
      )

      // Its own sandbox: narrowed, and the narrower policy is the ceiling from then on.
      const narrower = { allow_out: ["api.example.com"], deny_out: ["evil.example.com", "x.example.com"] }
      expect((yield* put(parent, narrower)).status).toBe(200)
      refused(yield* put(parent, ceiling), "deny_out must keep \"x.example.com\"")
      refused(yield* put(parent, { ...narrower, allow_out: ceiling.allow_out }), "\"*.example.com\" is not within")
      expect((yield* child()).body.network).toEqual(narrower)

      // An open sandbox's key: deny rules are still kept, anything else goes.
      const openParent =
        (yield* request(base, star, "POST", "/v1/sandboxes", { region: NOWHERE, network: { deny_out: ["1.2.3.4"] } }))
          .body.id as string
      const openKey = (yield* key(a, [`sandbox:${openParent}`])).token
      refused(yield* put(openParent, {}, openKey), "1.2.3.4")
      expect((yield* put(openParent, { allow_out: ["pypi.org"], deny_out: ["1.2.3.4"] }, openKey)).status).toBe(200)

      // Unconfined keys are held to their scopes only.
      expect((yield* put(parent, {}, star)).status).toBe(200)
    }))

  it.effect("POST secrets binds once, in order; a deleted secret leaves every sandbox (record and KV)", () =>
    Effect.gen(function*() {
      const { a, base, key } = yield* Stack
      const star = (yield* key(a, ["*"])).token
      const s1 = yield* newSecret(star)
      const s2 = yield* newSecret(star)
      const one = (yield* request(base, star, "POST", "/v1/sandboxes", {
        region: NOWHERE,
        network: { deny_out: ["example.net"] }
      }))
        .body.id as string
      const two = (yield* request(base, star, "POST", "/v1/sandboxes", { region: NOWHERE, secrets: [s1.id] })).body
        .id as string
      for (const secretId of [s1.id, s2.id, s1.id]) {
        const bound = yield* request(base, star, "POST", `/v1/sandboxes/${one}/secrets`, { secret_id: secretId })
        expect(bound.status).toBe(204)
        expect(bound.text).toBe("")
      }
      expect((yield* request(base, star, "GET", `/v1/sandboxes/${one}`)).body.secrets).toEqual([s1.id, s2.id])
      const policy = { allow_out: [], deny_out: ["example.net"] }
      yield* egressUntil(`sandbox.${one}`, entryIs({ policy, secretIds: [s1.id, s2.id] }))

      const missing = yield* request(base, star, "POST", `/v1/sandboxes/${one}/secrets`, {
        secret_id: "sec_00000000000000000000000000"
      })
      expect(missing.status).toBe(400)
      expect(missing.body.issues).toEqual([{ path: "secret_id", message: "no such secret in this org" }])
      const malformed = yield* request(base, star, "POST", `/v1/sandboxes/${one}/secrets`, { secret_id: "nope" })
      expect(malformed.status).toBe(400)

      // Deleting s1 unbinds it from both sandboxes, in their records and entries.
      expect((yield* request(base, star, "DELETE", `/v1/secrets/${s1.id}`)).status).toBe(200)
      expect((yield* request(base, star, "GET", `/v1/sandboxes/${one}`)).body.secrets).toEqual([s2.id])
      expect((yield* request(base, star, "GET", `/v1/sandboxes/${two}`)).body.secrets).toEqual([])
      yield* egressUntil(`sandbox.${one}`, entryIs({ policy, secretIds: [s2.id] }))
      yield* egressUntil(`sandbox.${two}`, entryIs({ policy: { allow_out: [], deny_out: [] }, secretIds: [] }))
      yield* egressUntil(`secret.${s1.id}`, (t) => t === null)
      const gone = yield* request(base, star, "POST", `/v1/sandboxes/${one}/secrets`, { secret_id: s1.id })
      expect(gone.status).toBe(400)

      // 32 secrets at most.
      const full = (yield* request(base, star, "POST", "/v1/sandboxes", { region: NOWHERE })).body.id as string
      for (let i = 0; i < 32; i++) {
        const s = yield* newSecret(star)
        expect((yield* request(base, star, "POST", `/v1/sandboxes/${full}/secrets`, { secret_id: s.id })).status)
          .toBe(204)
      }
      const extra = yield* newSecret(star)
      const over = yield* request(base, star, "POST", `/v1/sandboxes/${full}/secrets`, { secret_id: extra.id })
      expect(over.status).toBe(409)
    }))
})
