/** The file browser's paths (pure): joined, their parent, their name, the breadcrumb. */
import { describe, expect, it } from "@effect/vitest"
import { archiveUrl, crumbsOf, fileUrl, joinPath, nameOf, parentOf } from "../src/files.ts"

describe("paths in the sandbox", () => {
  it.each([
    ["/", "a", "/a"],
    ["/tmp", "a b", "/tmp/a b"],
    ["/tmp/", "x", "/tmp/x"]
  ])("joinPath(%j, %j) is %j", (folder, name, path) => expect(joinPath(folder, name)).toBe(path))

  it.each([
    ["/", "/"],
    ["/tmp", "/"],
    ["/tmp/work", "/tmp"],
    ["/tmp/work/", "/tmp"],
    ["/a/b/c", "/a/b"]
  ])("parentOf(%j) is %j", (path, parent) => expect(parentOf(path)).toBe(parent))

  it.each([
    ["/", "/"],
    ["/tmp", "tmp"],
    ["/tmp/work/", "work"]
  ])("nameOf(%j) is %j", (path, name) => expect(nameOf(path)).toBe(name))

  it("the breadcrumb: every folder from the root down", () => {
    expect(crumbsOf("/")).toEqual([["/", "/"]])
    expect(crumbsOf("/tmp/work")).toEqual([["/", "/"], ["tmp", "/tmp"], ["work", "/tmp/work"]])
  })

  it("download addresses: the path (and the archive's format) in the query, escaped", () => {
    expect(fileUrl("sbx_1", "/tmp/a&b c.txt")).toBe("/v1/sandboxes/sbx_1/files?path=%2Ftmp%2Fa%26b+c.txt")
    expect(archiveUrl("sbx_1", "/tmp/work")).toBe("/v1/sandboxes/sbx_1/files/archive?path=%2Ftmp%2Fwork&format=tar.gz")
  })
})
