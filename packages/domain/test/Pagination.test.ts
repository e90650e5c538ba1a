import { describe, expect, it } from "@effect/vitest"
import { Schema } from "effect"
import { LIMIT_MAX, ListQuery, Page, pageInfo } from "../src/Pagination.ts"
import { ok, refusedAt } from "./helpers.ts"

describe("Pagination", () => {
  it("defaults limit 50 and offset 0", () => {
    expect(ok(ListQuery, {})).toEqual({ limit: 50, offset: 0 })
    expect(ok(ListQuery, { limit: "1", offset: "0" })).toEqual({ limit: 1, offset: 0 })
    expect(ok(ListQuery, { limit: "500", offset: "2147483647" })).toEqual({ limit: 500, offset: 2147483647 })
    expect(ok(ListQuery, { limit: "007" })).toEqual({ limit: 7, offset: 0 })
  })

  it("refuses bad values instead of clamping", () => {
    for (const limit of ["0", "501", "1.5", "-1", "+1", "1e2", "abc", "", " 5", "5 ", "0x10", "99999999999", "١٢"]) {
      expect(refusedAt(ListQuery, { limit }), limit).toEqual(["limit"])
    }
    for (const offset of ["-1", "1.5", "abc", "", "2147483648", "9007199254740993"]) {
      expect(refusedAt(ListQuery, { offset }), offset).toEqual(["offset"])
    }
    expect(refusedAt(ListQuery, { limit: 5 })).toEqual(["limit"])
    expect(LIMIT_MAX).toBe(500)
  })

  it("builds the envelope", () => {
    const Rows = Page("things", Schema.Struct({ n: Schema.Int }))
    const info = pageInfo({ offset: 10, limit: 5 }, 5, 16)
    expect(info).toEqual({ total: 16, offset: 10, limit: 5, has_more: true })
    expect(pageInfo({ offset: 10, limit: 5 }, 5, 15).has_more).toBe(false)
    expect(pageInfo({ offset: 0, limit: 50 }, 0, 0)).toEqual({ total: 0, offset: 0, limit: 50, has_more: false })
    expect(pageInfo({ offset: 100, limit: 50 }, 0, 3).has_more).toBe(false)
    const body = { things: [{ n: 1 }], ...info }
    expect(Schema.encodeSync(Rows)(body)).toEqual(body)
    expect(Object.keys(Rows.fields).sort()).toEqual(["has_more", "limit", "offset", "things", "total"])
  })
})
