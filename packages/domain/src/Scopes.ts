/**
 * The scope grammar of docs/contract.md#scopes and the pure checks on it.
 *
 * Tokens: `*`; `<resource>:<action>`; `<resource>` and `<resource>:*` (every action the
 * resource lists); `sandbox:<sandbox_id>` (confinement to one sandbox and its direct children).
 * Decisions beyond the design (docs/contract.md#scope-tokens):
 * - `[]` is rejected: a key that can do nothing is a mistake. Omitted scopes default to `["*"]`
 *   in the request schema, not here.
 * - Duplicates are accepted and removed; token order is kept.
 * - At most one `sandbox:<id>` (docs/contract.md#scope-tokens: "confines the key to one sandbox");
 *   `*` together with `sandbox:<id>` is rejected as contradictory (a confined key must never be
 *   full access).
 * - A `sandbox:<id>` key has sandboxes read and write, but only within its confinement
 *   (Confinement.ts: which sandboxes, its egress ceiling); any `sandboxes...` token beside it adds
 *   nothing. Other resources need their own tokens.
 * - At most 64 tokens of at most 200 characters each.
 */
import { Result, Schema } from "effect"
import { InvalidScope } from "./Errors.ts"
import { SandboxId } from "./Ids.ts"

export const RESOURCES = ["sandboxes", "templates", "volumes", "apps", "secrets"] as const
export type Resource = (typeof RESOURCES)[number]

export const ACTIONS_OF = {
  sandboxes: ["read", "write"],
  templates: ["read", "write"],
  volumes: ["read", "write"],
  apps: ["read", "write"],
  secrets: ["read", "write", "use"]
} as const satisfies Record<Resource, ReadonlyArray<string>>
export type ActionOf<R extends Resource> = (typeof ACTIONS_OF)[R][number]
export type Action = ActionOf<Resource>

export const MAX_TOKENS = 64
export const MAX_TOKEN_LENGTH = 200

/** One parsed token. */
export type ScopeToken =
  | { readonly _tag: "All" }
  | { readonly _tag: "ResourceAction"; readonly resource: Resource; readonly action: Action }
  | { readonly _tag: "ResourceAll"; readonly resource: Resource }
  | { readonly _tag: "Sandbox"; readonly sandboxId: SandboxId }

/** What a credential may do, derived from its scope tokens. */
export interface Grant {
  /** The normalized tokens (deduplicated, in first-seen order): what a key row lists. */
  readonly tokens: ReadonlyArray<string>
  /** `*` present. */
  readonly full: boolean
  /** Actions held per resource, write already implying read. */
  readonly actions: ReadonlyMap<Resource, ReadonlySet<Action>>
  /** The one sandbox a `sandbox:<id>` key is confined to, or null. */
  readonly sandboxId: SandboxId | null
}

/** Sessions and `["*"]` keys. */
export const FULL_ACCESS: Grant = {
  tokens: ["*"],
  full: true,
  actions: new Map(RESOURCES.map((r) => [r, new Set<Action>(ACTIONS_OF[r])])),
  sandboxId: null
}

/** Default `scopes` of a new key when omitted. */
export const DEFAULT_SCOPES: ReadonlyArray<string> = ["*"]

const isResource = (s: string): s is Resource => (RESOURCES as ReadonlyArray<string>).includes(s)
const isSandboxId = Schema.is(SandboxId)

const invalid = (token: string, why: string) =>
  Result.fail(new InvalidScope({ error: `Invalid scope token ${JSON.stringify(token)}: ${why}` }))

/** Parses one token. */
export const parseToken = (token: string): Result.Result<ScopeToken, InvalidScope> => {
  if (token.length === 0) return invalid(token, "empty token")
  if (token.length > MAX_TOKEN_LENGTH) {
    return invalid(token.slice(0, 40) + "...", `longer than ${MAX_TOKEN_LENGTH} characters`)
  }
  if (token === "*") return Result.succeed({ _tag: "All" })
  if (!/^[a-z0-9_*:]+$/.test(token)) {
    return invalid(
      token,
      "malformed (expected *, <resource>, <resource>:<action>, <resource>:* or sandbox:<sandbox_id>)"
    )
  }
  const parts = token.split(":")
  if (parts.length > 2) return invalid(token, "malformed (too many ':' separators)")
  const [head, action] = parts as [string, string | undefined]
  if (head === "sandbox") {
    if (action === undefined || action.length === 0) return invalid(token, "needs a sandbox id: sandbox:<sandbox_id>")
    if (action === "*") return invalid(token, "sandbox:* is not allowed; name one sandbox id")
    if (!isSandboxId(action)) return invalid(token, `${JSON.stringify(action)} is not a sandbox id`)
    return Result.succeed({ _tag: "Sandbox", sandboxId: action })
  }
  if (head.length === 0) return invalid(token, "missing resource before ':'")
  if (!isResource(head)) {
    return invalid(token, `unknown resource ${JSON.stringify(head)} (known: ${RESOURCES.join(", ")})`)
  }
  if (action === undefined || action === "*") return Result.succeed({ _tag: "ResourceAll", resource: head })
  if (action.length === 0) return invalid(token, "missing action after ':'")
  const listed: ReadonlyArray<string> = ACTIONS_OF[head]
  if (!listed.includes(action)) {
    return invalid(token, `${head} has no action ${JSON.stringify(action)} (actions: ${listed.join(", ")})`)
  }
  return Result.succeed({ _tag: "ResourceAction", resource: head, action: action as Action })
}

/**
 * Parses a key's scope tokens into a Grant, or names the first bad token. Used at mint (400
 * `invalid_scope`) and when loading a stored key (stored tokens were valid at mint).
 */
export const parseScopes = (tokens: ReadonlyArray<string>): Result.Result<Grant, InvalidScope> => {
  if (tokens.length === 0) {
    return Result.fail(new InvalidScope({ error: "scopes must not be empty; omit it for [\"*\"]" }))
  }
  if (tokens.length > MAX_TOKENS) {
    return Result.fail(new InvalidScope({ error: `at most ${MAX_TOKENS} scope tokens are allowed` }))
  }
  const seen: Array<string> = []
  let full = false
  let sandboxId: SandboxId | null = null
  const actions = new Map<Resource, Set<Action>>()
  const add = (resource: Resource, granted: ReadonlyArray<Action>) => {
    const set = actions.get(resource) ?? new Set<Action>()
    for (const a of granted) set.add(a)
    actions.set(resource, set)
  }
  for (const token of tokens) {
    if (typeof token !== "string") return Result.fail(new InvalidScope({ error: "scope tokens must be strings" }))
    const parsed = parseToken(token)
    if (Result.isFailure(parsed)) return Result.fail(parsed.failure)
    if (seen.includes(token)) continue
    seen.push(token)
    const t = parsed.success
    switch (t._tag) {
      case "All":
        full = true
        break
      case "ResourceAll":
        add(t.resource, ACTIONS_OF[t.resource])
        break
      case "ResourceAction":
        // write implies read; nothing implies use except the whole-resource tokens.
        add(t.resource, t.action === "write" ? ["read", "write"] : [t.action])
        break
      case "Sandbox":
        if (sandboxId !== null && sandboxId !== t.sandboxId) {
          return invalid(token, "a key can be confined to one sandbox only")
        }
        sandboxId = t.sandboxId
        break
    }
  }
  if (full && sandboxId !== null) {
    return Result.fail(new InvalidScope({ error: "\"*\" cannot be combined with sandbox:<sandbox_id>" }))
  }
  if (full) return Result.succeed({ ...FULL_ACCESS, tokens: seen })
  if (sandboxId !== null) actions.set("sandboxes", new Set<Action>(["read", "write"]))
  return Result.succeed({ tokens: seen, full, actions, sandboxId })
}

/** Full access: only `*` (and sessions). Account-level routes require it. */
export const isFullAccess = (grant: Grant): boolean => grant.full

/**
 * Whether the grant holds `action` on `resource`. For a `sandbox:<id>` key this answers
 * sandboxes read/write as true; `Confinement.sandboxAccess` then confines which sandboxes.
 */
export const allows = <R extends Resource>(grant: Grant, resource: R, action: ActionOf<R>): boolean =>
  grant.full || (grant.actions.get(resource)?.has(action) ?? false)

/** GET and HEAD read; every other method writes. */
export const requiredAction = (method: string): "read" | "write" => {
  const m = method.toUpperCase()
  return m === "GET" || m === "HEAD" ? "read" : "write"
}

/** The token that would satisfy a check, for `insufficient_scope.required_scope`. */
export const requiredScope = <R extends Resource>(resource: R, action: ActionOf<R>): string => `${resource}:${action}`

/** The sandbox a key is confined to, or null. */
export const sandboxScopeOf = (grant: Grant): SandboxId | null => grant.sandboxId
