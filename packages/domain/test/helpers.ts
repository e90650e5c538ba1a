import { Exit, Schema } from "effect"
import { invalidRequestFrom, type ValidationIssue } from "../src/Errors.ts"

/** Decodes like a request handler would: the value, or the issues of `invalid_request`. */
export const decode = <S extends Schema.Decoder<unknown>>(
  schema: S,
  input: unknown
): { readonly ok: true; readonly value: S["Type"] } | {
  readonly ok: false
  readonly issues: ReadonlyArray<ValidationIssue>
} => {
  const exit = Schema.decodeUnknownExit(schema as Schema.Decoder<S["Type"]>)(input, { errors: "all" })
  if (Exit.isSuccess(exit)) return { ok: true, value: exit.value }
  const failure = exit.cause.reasons.find((r) => r._tag === "Fail")
  if (failure?._tag !== "Fail") throw new Error("decoding died")
  return { ok: false, issues: invalidRequestFrom(failure.error).issues }
}

export const ok = <S extends Schema.Decoder<unknown>>(schema: S, input: unknown): S["Type"] => {
  const r = decode(schema, input)
  if (!r.ok) throw new Error(`expected ${JSON.stringify(input)} to decode: ${JSON.stringify(r.issues)}`)
  return r.value
}

/** The paths of the issues when `input` is refused (throws when it is accepted). */
export const refusedAt = (schema: Schema.Decoder<unknown>, input: unknown): Array<string> => {
  const r = decode(schema, input)
  if (r.ok) throw new Error(`expected ${JSON.stringify(input)} to be refused`)
  return r.issues.map((i) => i.path)
}
