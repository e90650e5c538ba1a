/**
 * Org secrets through the real API (docs/contract.md#secrets, #secrets-scopes): what each route answers
 * to each scope, the service-key rule and its setting re-read while the API runs, validation,
 * other orgs, and that a value never comes back: not in a response, not in a log line, not in
 * the clear in the `egress` KV bucket, where it is sealed for the hosts' proxies.
 */
import { expect, layer } from "@effect/vitest"
import { EgressSecret, secretValueAad } from "@svc/host-protocol/Egress"
import { Effect, Schema } from "effect"
import { randomBytes } from "node:crypto"
import { egressUntil, type Org, request, Stack, StackLayer } from "./Secrets.support.ts"

const canary = (what: string) => `canary-${what}-${randomBytes(12).toString("hex")}`
/** Every value a test sends, to search responses and logs for. */
const values: Array<string> = []
const secretBody = (overrides: Record<string, unknown> = {}) => {
  const value = canary("v")
  values.push(value)
  return { name: `s-${randomBytes(6).toString("hex")}`, value, allowed_hosts: ["api.example.com"], ...overrides }
}

/** Asserts no value sent so far appears in `text`. */
const noValueIn = (text: string, where: string) => {
  for (const v of values) expect(text.includes(v), `${where} holds a secret value`).toBe(false)
}

/** A secret of `org` made by its user's `*` key; the answer checked, the body returned. */
const makeSecret = (org: Org, overrides: Record<string, unknown> = {}) =>
  Effect.gen(function*() {
    const { base, key } = yield* Stack
    const star = yield* key(org, ["*"])
    const body = secretBody(overrides)
    const res = yield* request(base, star.token, "POST", "/v1/secrets", body)
    expect(res.status, JSON.stringify(res.body)).toBe(201)
    noValueIn(res.text, "create response")
    return { id: res.body.id as string, value: body.value as string, name: body.name as string }
  })

const openEntry = (text: string | null) =>
  Effect.gen(function*() {
    const { box } = yield* Stack
    const entry = Schema.decodeUnknownSync(EgressSecret)(JSON.parse(text!))
    return { entry, value: yield* Effect.orDie(box.open(entry.sealedValue, secretValueAad(entry.secretId))) }
  })

/** No agent serves this stack: its sandboxes ask for a region none serves (created, then error). */
const NOWHERE = "nowhere"

layer(StackLayer, { timeout: 120_000, excludeTestServices: true })("Secrets", (it) => {
  it.effect("create, get, list, rotate, patch, delete: metadata only, the KV entry sealed and current", () =>
    Effect.gen(function*() {
      const { a, base, key, logs } = yield* Stack
      const star = (yield* key(a, ["*"])).token
      const body = secretBody({ allowed_hosts: ["API.example.com", "*.example.org"] })
      const created = yield* request(base, star, "POST", "/v1/secrets", body)
      expect(created.status).toBe(201)
      expect(Object.keys(created.body).sort()).toEqual(
        ["allowed_hosts", "createdAt", "header_format", "header_name", "id", "name", "rotatedAt"]
      )
      expect(created.body).toMatchObject({
        name: body.name,
        allowed_hosts: ["api.example.com", "*.example.org"],
        header_name: "Authorization",
        header_format: "Bearer {value}",
        rotatedAt: null
      })
      const id = created.body.id as string
      expect(id.startsWith("sec_")).toBe(true)

      // The hosts' entry: the metadata and the value sealed for `secret:<id>`, never in the clear.
      const text = yield* egressUntil(`secret.${id}`, (t) => t !== null)
      noValueIn(text!, "the KV entry")
      const first = yield* openEntry(text)
      expect(first.value).toBe(body.value)
      expect(first.entry).toMatchObject({
        secretId: id,
        orgId: a.id,
        allowedHosts: ["api.example.com", "*.example.org"],
        headerName: "Authorization",
        headerFormat: "Bearer {value}"
      })

      const got = yield* request(base, star, "GET", `/v1/secrets/${id}`)
      expect(got.status).toBe(200)
      expect(got.body).toEqual(created.body)
      const listed = yield* request(base, star, "GET", "/v1/secrets?limit=500")
      expect(listed.status).toBe(200)
      expect(listed.body).toMatchObject({ offset: 0, limit: 500, has_more: false })
      expect(listed.body.secrets.find((s: { id: string }) => s.id === id)).toEqual(created.body)

      const next = canary("rotated")
      values.push(next)
      const rotated = yield* request(base, star, "PUT", `/v1/secrets/${id}/value`, { value: next })
      expect(rotated.status).toBe(200)
      expect(rotated.body.rotatedAt).not.toBeNull()
      const afterRotate = yield* egressUntil(`secret.${id}`, (t) => t !== text)
      expect((yield* openEntry(afterRotate)).value).toBe(next)

      const patched = yield* request(base, star, "PATCH", `/v1/secrets/${id}`, {
        allowed_hosts: ["uploads.example.net"],
        header_name: "X-Api-Key",
        header_format: "{value}"
      })
      expect(patched.status).toBe(200)
      expect(patched.body).toMatchObject({
        allowed_hosts: ["uploads.example.net"],
        header_name: "X-Api-Key",
        header_format: "{value}"
      })
      const afterPatch = yield* openEntry(yield* egressUntil(`secret.${id}`, (t) => t !== afterRotate))
      expect(afterPatch.entry).toMatchObject({ allowedHosts: ["uploads.example.net"], headerName: "X-Api-Key" })
      expect(afterPatch.value).toBe(next)

      const deleted = yield* request(base, star, "DELETE", `/v1/secrets/${id}`)
      expect(deleted.status).toBe(200)
      expect(deleted.body.id).toBe(id)
      yield* egressUntil(`secret.${id}`, (t) => t === null)
      expect((yield* request(base, star, "GET", `/v1/secrets/${id}`)).status).toBe(404)
      expect((yield* request(base, star, "DELETE", `/v1/secrets/${id}`)).status).toBe(404)
      // The name is free again.
      expect((yield* request(base, star, "POST", "/v1/secrets", { ...secretBody(), name: body.name })).status)
        .toBe(201)

      for (const res of [created, got, listed, rotated, patched, deleted]) noValueIn(res.text, "a response")
      // The audit log has the four changes, none with a value.
      const audit = yield* request(base, star, "GET", "/v1/audit?limit=500")
      const actions = audit.body.entries.filter((e: { target_id: string }) => e.target_id === id).map((
        e: { action: string }
      ) => e.action)
      expect(actions.sort()).toEqual(["secret.created", "secret.deleted", "secret.rotated", "secret.updated"])
      noValueIn(audit.text, "the audit log")
      // The request log is captured (so the search below can find something), yet holds no value.
      expect(logs.some((l) => l.includes("/v1/secrets"))).toBe(true)
      noValueIn(logs.join("\n"), "the API's log")
    }))

  it.effect("Idempotency-Key on create: the same body answers the first response, another body 422", () =>
    Effect.gen(function*() {
      const { a, base, key } = yield* Stack
      const star = (yield* key(a, ["*"])).token
      const body = secretBody()
      const headers = { "idempotency-key": `idem-${randomBytes(6).toString("hex")}` }
      const first = yield* request(base, star, "POST", "/v1/secrets", body, headers)
      const again = yield* request(base, star, "POST", "/v1/secrets", body, headers)
      expect(first.status).toBe(201)
      expect(again.status).toBe(200)
      expect(again.body).toEqual(first.body)
      const other = yield* request(base, star, "POST", "/v1/secrets", { ...body, value: canary("other") }, headers)
      expect(other.status).toBe(422)
      expect(other.body.code).toBe("idempotency_key_reused")
      const listed = yield* request(base, star, "GET", "/v1/secrets?limit=500")
      expect(listed.body.secrets.filter((s: { name: string }) => s.name === body.name)).toHaveLength(1)
      noValueIn(again.text + other.text, "a replay")
    }))

  it.effect("refuses bad bodies with invalid_request naming the field, never quoting the value; duplicate names 409", () =>
    Effect.gen(function*() {
      const { a, base, key } = yield* Stack
      const star = (yield* key(a, ["*"])).token
      const secret = canary("bad")
      values.push(secret)
      const cases: ReadonlyArray<readonly [string, Record<string, unknown>]> = [
        ["header_name", { header_name: "Bad Header" }],
        ["header_name", { header_name: "Host" }],
        ["header_name", { header_name: "transfer-encoding" }],
        ["header_format", { header_format: "Bearer" }],
        ["allowed_hosts", { allowed_hosts: [] }],
        ["allowed_hosts.0", { allowed_hosts: ["169.254.169.254"] }],
        ["allowed_hosts.0", { allowed_hosts: ["*.com"] }],
        ["value", { value: `${secret}\r\nX-Injected: yes` }],
        ["value", { value: `${secret}\n` }],
        ["value", { value: "" }],
        ["value", { value: secret + "x".repeat(64 * 1024) }]
      ]
      for (const [path, overrides] of cases) {
        const res = yield* request(base, star, "POST", "/v1/secrets", { ...secretBody(), ...overrides })
        expect(res.status, JSON.stringify(overrides).slice(0, 80)).toBe(400)
        expect(res.body.code).toBe("invalid_request")
        expect(res.body.issues.map((i: { path: string }) => i.path)).toContain(path)
        noValueIn(res.text, "an error")
      }
      const made = yield* makeSecret(a)
      const rotate = yield* request(base, star, "PUT", `/v1/secrets/${made.id}/value`, { value: `${secret}\r\n` })
      expect(rotate.status).toBe(400)
      noValueIn(rotate.text, "an error")
      const patch = yield* request(base, star, "PATCH", `/v1/secrets/${made.id}`, { header_format: "no placeholder" })
      expect(patch.status).toBe(400)
      const duplicate = yield* request(base, star, "POST", "/v1/secrets", { ...secretBody(), name: made.name })
      expect(duplicate.status).toBe(409)
      expect(duplicate.body.code).toBe("conflict")
      noValueIn(duplicate.text, "an error")
    }))

  it.effect("another org's secret is a missing one: 404 on every route, and it cannot be bound", () =>
    Effect.gen(function*() {
      const { a, b, base, key } = yield* Stack
      const mine = yield* makeSecret(a)
      const theirs = (yield* key(b, ["*"])).token
      for (
        const [method, path, body] of [
          ["GET", `/v1/secrets/${mine.id}`, undefined],
          ["PUT", `/v1/secrets/${mine.id}/value`, { value: "x" }],
          ["PATCH", `/v1/secrets/${mine.id}`, { header_format: "{value}" }],
          ["DELETE", `/v1/secrets/${mine.id}`, undefined]
        ] as const
      ) {
        const res = yield* request(base, theirs, method, path, body)
        expect(res.status, `${method} ${path}`).toBe(404)
        expect(res.body.code).toBe("not_found")
      }
      const list = yield* request(base, theirs, "GET", "/v1/secrets?limit=500")
      expect(list.body.secrets.some((s: { id: string }) => s.id === mine.id)).toBe(false)
      // Binding it to org B's sandbox, at create or later: 400 naming the entry.
      const created = yield* request(base, theirs, "POST", "/v1/sandboxes", { region: NOWHERE, secrets: [mine.id] })
      expect(created.status).toBe(400)
      expect(created.body.issues).toEqual([{ path: "secrets.0", message: "no such secret in this org" }])
      const sandbox = yield* request(base, theirs, "POST", "/v1/sandboxes", { region: NOWHERE })
      const bound = yield* request(base, theirs, "POST", `/v1/sandboxes/${sandbox.body.id}/secrets`, {
        secret_id: mine.id
      })
      expect(bound.status).toBe(400)
      expect(bound.body.issues[0].path).toBe("secret_id")
      // And org A's key cannot reach org B's sandbox.
      const own = (yield* key(a, ["*"])).token
      const foreign = yield* request(base, own, "POST", `/v1/sandboxes/${sandbox.body.id}/secrets`, {
        secret_id: mine.id
      })
      expect(foreign.status).toBe(404)
    }))
})
