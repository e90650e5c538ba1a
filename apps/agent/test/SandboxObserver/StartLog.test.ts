/**
 * Reading a start_cmd's output a piece at a time, pure: lines cut at their ends, a line begun
 * kept for the next read, the allowance and the read size as bounds with what is dropped counted,
 * a file that shrank read again from its start; and the read script's output parsed.
 */
import { describe, expect, it } from "@effect/vitest"
import { parseRead, READ_BYTES, START, take } from "../../src/SandboxObserver/StartLog.ts"

const bytes = (text: string) => new TextEncoder().encode(text)

describe("start_cmd output reads", () => {
  const cases: ReadonlyArray<{
    readonly name: string
    readonly cursor: { offset: number; partial: string }
    readonly size: number
    readonly chunk: string
    readonly allowance: number
    readonly lines: ReadonlyArray<string>
    readonly next: { offset: number; partial: string }
    readonly droppedLines: number
    readonly droppedBytes: number
  }> = [
    {
      name: "nothing new",
      cursor: START,
      size: 0,
      chunk: "",
      allowance: 10,
      lines: [],
      next: { offset: 0, partial: "" },
      droppedLines: 0,
      droppedBytes: 0
    },
    {
      name: "whole lines, CRLF trimmed",
      cursor: START,
      size: 9,
      chunk: "a\r\nbc\ndef\n".slice(0, 9),
      allowance: 10,
      lines: ["a", "bc"],
      next: { offset: 9, partial: "def" },
      droppedLines: 0,
      droppedBytes: 0
    },
    {
      name: "a line begun last time is ended",
      cursor: { offset: 9, partial: "def" },
      size: 13,
      chunk: "gh\nx",
      allowance: 10,
      lines: ["defgh"],
      next: { offset: 13, partial: "x" },
      droppedLines: 0,
      droppedBytes: 0
    },
    {
      name: "over the allowance: the rest is dropped up to the file's end",
      cursor: START,
      size: 100,
      chunk: "1\n2\n3\n4\n5\n",
      allowance: 2,
      lines: ["1", "2"],
      next: { offset: 100, partial: "" },
      droppedLines: 3,
      droppedBytes: 90
    },
    {
      name: "a file that shrank is read from its start next time",
      cursor: { offset: 50, partial: "half" },
      size: 10,
      chunk: "",
      allowance: 10,
      lines: [],
      next: { offset: 0, partial: "" },
      droppedLines: 0,
      droppedBytes: 0
    }
  ]
  for (const c of cases) {
    it(c.name, () => {
      const taken = take(c.cursor, c.size, bytes(c.chunk), c.allowance)
      expect(taken).toEqual({
        lines: c.lines,
        cursor: c.next,
        droppedLines: c.droppedLines,
        droppedBytes: c.droppedBytes
      })
    })
  }

  it("a full read with more behind it skips to the file's end, counting the bytes", () => {
    const chunk = bytes("x".repeat(READ_BYTES - 2) + "\ny")
    const taken = take(START, READ_BYTES + 1000, chunk, 10)
    expect(taken.lines).toEqual(["x".repeat(READ_BYTES - 2)])
    expect(taken.cursor).toEqual({ offset: READ_BYTES + 1000, partial: "" })
    expect(taken.droppedBytes).toBe(1000)
  })

  it("a line longer than 4 KiB without an end is logged as it is", () => {
    const taken = take(START, 5000, bytes("y".repeat(5000)), 10)
    expect(taken.lines).toEqual(["y".repeat(5000)])
    expect(taken.cursor).toEqual({ offset: 5000, partial: "" })
  })

  it("the read script's output: the size line, then the bytes", () => {
    const read = parseRead(bytes("12\nhello\nworld"))
    expect(read?.size).toBe(12)
    expect(new TextDecoder().decode(read?.chunk)).toBe("hello\nworld")
    expect(parseRead(bytes("no size"))).toBeUndefined()
    expect(parseRead(bytes("-3\n"))).toBeUndefined()
    expect(parseRead(bytes("abc\n"))).toBeUndefined()
  })
})
