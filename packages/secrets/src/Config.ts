/**
 * Settings of org secrets: which userless service keys may manage them (docs/contract.md#secrets-scopes). Read at
 * every check, never kept from the start (`Secrets/Managers.ts`):
 *
 * | variable | default | meaning |
 * |---|---|---|
 * | `SVC_SECRET_MANAGER_API_KEY_IDS` | empty | key ids (`key_...`, comma-separated) of service keys allowed to manage secrets |
 * | `SVC_SECRET_MANAGER_API_KEY_IDS_FILE` | unset | a file holding more such ids (comma- or whitespace-separated), re-read at every check |
 *
 * A process's environment cannot change after it starts: the file is what an operator edits to
 * rotate a listed key without a restart (add the replacement's id, switch, remove the old id).
 */
import * as Env from "@svc/config/Env"
import { Config, Schema } from "effect"

const KEY_ID = /^key_[0-9A-Za-z]+$/

/** Ids in a list (commas and white space separate them); anything that is not a key id is refused. */
export const parseKeyIds = (text: string): ReadonlyArray<string> | string => {
  const ids = text.split(/[\s,]+/).filter((s) => s.length > 0)
  const bad = ids.find((id) => !KEY_ID.test(id))
  return bad === undefined ? ids : `${JSON.stringify(bad.slice(0, 64))} is not an API key id (key_...)`
}

const KeyIds = Schema.String.check(
  Schema.makeFilter((text: string) => {
    const parsed = parseKeyIds(text)
    return typeof parsed === "string" ? parsed : true
  }, { expected: "API key ids (key_...), comma-separated" })
)

export const SecretManagerKeyIds: Env.Setting<ReadonlyArray<string>> = Env.describe(
  Config.schema(KeyIds, "SVC_SECRET_MANAGER_API_KEY_IDS").pipe(
    Config.map((text) => parseKeyIds(text) as ReadonlyArray<string>),
    Config.withDefault<ReadonlyArray<string>>([])
  ),
  { name: "SVC_SECRET_MANAGER_API_KEY_IDS", default: "empty", format: "key ids" }
)

export const SecretManagerKeyIdsFile: Env.Setting<string> = Env.text(
  "SVC_SECRET_MANAGER_API_KEY_IDS_FILE",
  "",
  "path"
)

export const settings: ReadonlyArray<Env.AnySetting> = [SecretManagerKeyIds, SecretManagerKeyIdsFile]
