/**
 * Lists (docs/contract.md#conventions): `?limit` (default 50, 1 to 500) and `?offset` (default 0),
 * and the envelope `{<items>: [...], total, offset, limit, has_more}`, newest first.
 *
 * Out-of-range values are `invalid_request`, never clamped. Query values must be plain decimal
 * digits: "1.5", "-1", "+1", "1e3", " 1", "" and anything past the maximum are refused.
 */
import { Effect, Schema, SchemaTransformation } from "effect"
import { enforcedMax } from "./Text.ts"

export const LIMIT_DEFAULT = 50
export const LIMIT_MAX = 500
/** Larger offsets are refused: no list is that long, and it keeps numbers exact. */
export const OFFSET_MAX = 2_147_483_647

/** A non-negative integer written as decimal digits in a query string, within bounds. */
export const IntFromQuery = (minimum: number, maximum: number) =>
  Schema.String.check(
    enforcedMax(10),
    Schema.isPattern(/^\d{1,10}$/, { expected: "a whole number written in digits" })
  ).pipe(
    Schema.decodeTo(
      Schema.Int.check(Schema.isBetween({ minimum, maximum })),
      SchemaTransformation.transform({ decode: (s: string) => Number(s), encode: (n: number) => String(n) })
    )
  )

export const ListQuery = Schema.Struct({
  limit: IntFromQuery(1, LIMIT_MAX).pipe(Schema.withDecodingDefaultKey(Effect.succeed(String(LIMIT_DEFAULT)))),
  offset: IntFromQuery(0, OFFSET_MAX).pipe(Schema.withDecodingDefaultKey(Effect.succeed("0")))
})
export type ListQuery = typeof ListQuery.Type

/** The numbers every list response carries beside its named array. */
export const PageInfo = Schema.Struct({
  total: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  offset: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  limit: Schema.Int.check(Schema.isGreaterThanOrEqualTo(0)),
  has_more: Schema.Boolean
})
export type PageInfo = typeof PageInfo.Type

/**
 * The response schema of a list: `Page("keys", ApiKeyRow)` is `{keys: [...], total, offset, limit, has_more}`,
 * at most `max` rows (`?limit`'s maximum; a list that is not paged by `?limit` names its own).
 */
export const Page = <const K extends string, S extends Schema.Top>(key: K, item: S, max: number = LIMIT_MAX) =>
  Schema.Struct({
    ...({ [key]: Schema.Array(item).check(Schema.isMaxLength(max)) } as {
      readonly [P in K]: Schema.$Array<S>
    }),
    ...PageInfo.fields
  })

/** The page numbers for `rows` fetched with `query` out of `total`. */
export const pageInfo = (
  query: { readonly offset: number; readonly limit: number },
  returned: number,
  total: number
): PageInfo => ({
  total,
  offset: query.offset,
  limit: query.limit,
  has_more: query.offset + returned < total
})
