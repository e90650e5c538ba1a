/**
 * Rows read from Postgres are decoded with a Schema where they are read, never cast: a row the
 * code does not expect (the code and a migration out of step, a hand edit) fails as a
 * `RowDecodeError` naming the query, instead of passing on as a wrong value.
 *
 * - `findAll`, `findOneOption`: effect's `SqlSchema` (a `Request` schema encodes the
 *   parameters, a `Result` schema decodes each row), with the decoding failure as
 *   `RowDecodeError`.
 * - `decoder`: the rows of a statement built where it runs (a dynamic `WHERE`, a batch of
 *   inputs, a reserved connection, a `RETURNING`), decoded the same way.
 *
 * Build them once, where the query is declared (module or layer), not per call: the row
 * schema's decoder is then compiled once (`SchemaJITCompiler`), and decoding a row costs about as
 * much as copying it (the dispatcher's and the relay's batches are on hot paths). Only schemas
 * without declarations or transformations compile (measured: 5 to 10 times slower otherwise,
 * tens of µs for a row of a few dates): row schemas check the columns as the driver returns
 * them (`Timestamptz` for a `Date`, `Int8` for a `bigint`) and the code that maps a row to its
 * record converts (`Number(...)`, `getTime()`, `DateTime.makeUnsafe`); no `Schema.Date`,
 * `decodeTo` or `encodeKeys` in a row schema.
 *
 * What `@effect/sql-pg` returns: `bigint` for int8 and `count(*)`, `number` for int4, `string`
 * for numeric, a `Date` for timestamptz, parsed values for json and jsonb.
 */
import { Effect, Schema } from "effect"
import { SchemaJITCompiler } from "effect/schema"
import { type SqlError, SqlSchema } from "effect/sql"

/** A row that its schema refuses: a defect of the code or the data, never the caller's. */
export class RowDecodeError extends Schema.TaggedError<RowDecodeError>()("RowDecodeError", {
  /** The query's name, e.g. `ApiKeys.get`. */
  query: Schema.String,
  message: Schema.String
}) {}

/** What a query can fail with: the database, or a row its schema refuses. */
export type QueryError = SqlError.SqlError | RowDecodeError

const compiled = <S extends Schema.Top>(schema: S): S => {
  SchemaJITCompiler.enable(schema.ast)
  return schema
}

const rowError = (query: string) => (error: Schema.SchemaError) => new RowDecodeError({ query, message: error.message })

/**
 * The rows of a statement, decoded by `Result`. Call it once per query; the function it returns
 * decodes the rows of each run.
 */
export const decoder = <S extends Schema.Top>(query: string, Result: S) => {
  const decode = Schema.decodeUnknownEffect(compiled(Schema.Array(compiled(Result))))
  const failed = rowError(query)
  return <E, R>(
    rows: Effect.Effect<ReadonlyArray<unknown>, E, R>
  ): Effect.Effect<ReadonlyArray<S["Type"]>, E | RowDecodeError, R | S["DecodingServices"]> =>
    Effect.flatMap(rows, (found) => Effect.mapError(decode(found), failed))
}

/**
 * `SqlSchema.findAll`: every row, decoded by `Result`. `Request` encodes the parameters; keep it
 * a schema without checks (its encoding then cannot fail, and a failure here is a row's).
 */
export const findAll = <Req extends Schema.Top, Res extends Schema.Top, E, R>(query: string, options: {
  readonly Request: Req
  readonly Result: Res
  readonly execute: (request: Req["Encoded"]) => Effect.Effect<ReadonlyArray<unknown>, E, R>
}) => {
  const find = SqlSchema.findAll({ ...options, Result: compiled(options.Result) })
  const failed = rowError(query)
  return (request: Req["Type"]) => Effect.catchIf(find(request), Schema.isSchemaError, (e) => Effect.fail(failed(e)))
}

/** `SqlSchema.findOneOption`: the first row decoded by `Result`, if any (see `findAll`). */
export const findOneOption = <Req extends Schema.Top, Res extends Schema.Top, E, R>(query: string, options: {
  readonly Request: Req
  readonly Result: Res
  readonly execute: (request: Req["Encoded"]) => Effect.Effect<ReadonlyArray<unknown>, E, R>
}) => {
  const find = SqlSchema.findOneOption({ ...options, Result: compiled(options.Result) })
  const failed = rowError(query)
  return (request: Req["Type"]) => Effect.catchIf(find(request), Schema.isSchemaError, (e) => Effect.fail(failed(e)))
}

// ---------------------------------------------------------------------------------------------
// Columns

/** A `timestamptz` column: a valid `Date` (a check, so the row schema still compiles). */
export const Timestamptz = Schema.Unknown.pipe(
  Schema.refine((u): u is Date => u instanceof Date && !Number.isNaN(u.getTime()), { expected: "a valid Date" })
)

/** An `int8` column (or `count(*)`, a `sum` of integers): the driver's `bigint`. */
export const Int8 = Schema.BigInt
