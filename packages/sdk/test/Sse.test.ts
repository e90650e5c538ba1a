import { describe, expect, it } from "@effect/vitest"
import { SseParser } from "../src/Sse.ts"

describe("SseParser", () => {
  it("splits messages at blank lines across chunks, joins data lines, keeps the last id, skips comments", () => {
    const parser = new SseParser()
    expect(parser.push(": connected\n\nid: 7\nevent: sandbox.created\nda")).toEqual([])
    expect(parser.push("ta: {\"a\":1}\n\n: keep-alive\n\ndata: one\ndata: two\r\n\r")).toEqual([
      { id: "7", event: "sandbox.created", data: "{\"a\":1}" }
    ])
    // The `\r\n` was split across chunks: one line end, not two.
    expect(parser.push("\nevent: x\ndata:no-space\n\n")).toEqual([
      { id: "7", event: "message", data: "one\ntwo" },
      { id: "7", event: "x", data: "no-space" }
    ])
  })

  it("an event without data is dispatched as nothing", () => {
    expect(new SseParser().push("event: lonely\n\nid: 3\n\n")).toEqual([])
  })
})
