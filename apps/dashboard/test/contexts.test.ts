/** A notebook cell's outputs from a streamed run's events (pure). */
import { describe, expect, it } from "@effect/vitest"
import { appendEvent, type Output } from "../src/contexts.ts"

const fold = (events: ReadonlyArray<readonly [string, unknown]>) =>
  events.reduce<ReadonlyArray<Output>>((outputs, [event, data]) => appendEvent(outputs, event, data), [])

describe("a run's events as a cell's outputs", () => {
  it("text of one stream is joined until another output comes between", () => {
    expect(fold([
      ["stdout", { text: "a" }],
      ["stdout", { text: "b\n" }],
      ["stderr", { text: "e" }],
      ["stdout", { text: "c" }]
    ])).toEqual([
      { kind: "stdout", text: "ab\n" },
      { kind: "stderr", text: "e" },
      { kind: "stdout", text: "c" }
    ])
  })

  it("results in order, by type", () => {
    expect(fold([["result", { type: "text/plain", data: "42" }], ["result", { type: "image/png", data: "iVBO" }]]))
      .toEqual([
        { kind: "result", type: "text/plain", data: "42" },
        { kind: "result", type: "image/png", data: "iVBO" }
      ])
  })

  it("an error: the run's exception, or the API's words when the context died", () => {
    expect(fold([["error", { name: "ZeroDivisionError", value: "division by zero", traceback: ["l1", "l2"] }]]))
      .toEqual([{ kind: "error", name: "ZeroDivisionError", value: "division by zero", traceback: ["l1", "l2"] }])
    expect(fold([["error", { error: "Context ctx_1 is dead", code: "conflict" }]]))
      .toEqual([{ kind: "error", name: "conflict", value: "Context ctx_1 is dead", traceback: [] }])
  })

  it("an event it does not know changes nothing", () => {
    expect(fold([["stdout", { text: "a" }], ["progress", { done: 1 }]])).toEqual([{ kind: "stdout", text: "a" }])
  })
})
