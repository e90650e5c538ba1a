import { formatImageReference, parseImageReference } from "@svc/domain/ImageReference"
import { Result } from "effect"
import { describe, expect, it } from "vitest"

const ok = (input: string) => Result.getOrThrow(parseImageReference(input))

describe("image references", () => {
  it.each([
    ["python:3.12-slim", "registry-1.docker.io", 443, "library/python", "3.12-slim", undefined, "3.12-slim"],
    ["node", "registry-1.docker.io", 443, "library/node", undefined, undefined, "latest"],
    ["docker.io/team/app:1", "registry-1.docker.io", 443, "team/app", "1", undefined, "1"],
    ["ghcr.io/org/tool:v2", "ghcr.io", 443, "org/tool", "v2", undefined, "v2"],
    ["registry.example.com:5000/a/b/c:x_y.z", "registry.example.com", 5000, "a/b/c", "x_y.z", undefined, "x_y.z"],
    ["localhost:5000/app", "localhost", 5000, "app", undefined, undefined, "latest"],
    [
      `r.io/app@sha256:${"a".repeat(64)}`,
      "r.io",
      443,
      "app",
      undefined,
      `sha256:${"a".repeat(64)}`,
      `sha256:${"a".repeat(64)}`
    ],
    [
      `r.io/app:1@sha256:${"b".repeat(64)}`,
      "r.io",
      443,
      "app",
      "1",
      `sha256:${"b".repeat(64)}`,
      `sha256:${"b".repeat(64)}`
    ]
  ])("%s", (input, hostname, port, repository, tag, digest, reference) => {
    expect(ok(input)).toMatchObject({ hostname, port, repository, tag, digest, reference })
  })

  it.each([
    ["", "1 to 512"],
    ["Team/App", "lowercase"],
    ["app:", "the tag"],
    ["app:-x", "the tag"],
    ["app@sha256:abc", "sha256:<64 hex digits>"],
    ["r.io:99999/app", "port"],
    ["r.io/app name", "no spaces"],
    ["r.io/../app", "lowercase components"]
  ])("refuses %j", (input, words) => {
    const parsed = parseImageReference(input)
    expect(Result.isFailure(parsed)).toBe(true)
    if (Result.isFailure(parsed)) expect(parsed.failure).toContain(words)
  })

  it("writes a reference back in full", () => {
    expect(formatImageReference(ok("python"))).toBe("registry-1.docker.io/library/python:latest")
    expect(formatImageReference(ok("r.io:5000/a:1"))).toBe("r.io:5000/a:1")
  })
})
