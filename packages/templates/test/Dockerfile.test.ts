import { parseDockerfile, substitute } from "@svc/templates/Dockerfile"
import { describe, expect, it } from "vitest"

const parsed = (text: string, args: Record<string, string> = {}) => {
  const result = parseDockerfile(text, args)
  if (result._tag !== "Parsed") throw new Error(JSON.stringify(result.issues))
  return result.value
}
const issues = (text: string) => {
  const result = parseDockerfile(text, {})
  return result._tag === "Issues" ? result.issues : []
}

describe("Dockerfile", () => {
  it("reads each instruction as a step, in order", () => {
    const value = parsed(
      [
        "# syntax comment",
        "ARG BASE=team/app:1",
        "FROM $BASE",
        "ARG V=0",
        "ENV A=1 B=\"two words\"",
        "ENV LEGACY value with spaces",
        "WORKDIR /srv",
        "WORKDIR app",
        "COPY --chown=1000:1000 a.txt b/ ./dest/",
        "ADD c.txt /c.txt",
        "RUN echo $V \\",
        "  && true",
        "RUN [\"/bin/echo\", \"exec form\"]",
        "SHELL [\"/bin/bash\", \"-c\"]",
        "RUN echo in bash",
        "USER app:staff",
        "EXPOSE 8080 9090/tcp 53/udp",
        "LABEL x=y",
        "ENTRYPOINT [\"/entry\"]",
        "CMD serve --port 8080",
        "HEALTHCHECK --interval=5s CMD [\"curl\", \"-f\", \"http://localhost:8080/\"]"
      ].join("\n"),
      { V: "7" }
    )
    expect(value.from).toBe("team/app:1")
    expect(value.usesContext).toBe(true)
    expect(value.readyCmd).toBe("curl -f http://localhost:8080/")
    expect(value.steps).toEqual([
      { env: { A: "1", B: "two words" } },
      { env: { LEGACY: "value with spaces" } },
      { workdir: "/srv" },
      { workdir: "/srv/app" },
      { copy: { sources: ["a.txt", "b/"], dest: "/srv/app/dest/", chown: "1000:1000" } },
      { copy: { sources: ["c.txt"], dest: "/c.txt" } },
      {
        run: "echo $V    && true",
        argv: ["/bin/sh", "-c", "echo $V    && true"],
        args: { BASE: "team/app:1", V: "7" }
      },
      { run: "/bin/echo exec form", argv: ["/bin/echo", "exec form"], args: { BASE: "team/app:1", V: "7" } },
      { shell: ["/bin/bash", "-c"] },
      { run: "echo in bash", argv: ["/bin/bash", "-c", "echo in bash"], args: { BASE: "team/app:1", V: "7" } },
      { user: "app:staff" },
      { expose: [8080, 9090] },
      { entrypoint: ["/entry"] },
      { cmd: ["/bin/bash", "-c", "serve --port 8080"] }
    ])
  })

  it("HEALTHCHECK NONE clears the ready command; none leaves it", () => {
    expect(parsed("FROM base\nHEALTHCHECK NONE\n").readyCmd).toBe(null)
    expect("readyCmd" in parsed("FROM base\n")).toBe(false)
  })

  it.each([
    ["FROM base\nVOLUME /data\n", "dockerfile:2", "VOLUME is not supported"],
    ["FROM base\nFROM debian\n", "dockerfile:2", "a second FROM"],
    ["RUN true\nFROM base\n", "dockerfile:1", "RUN before FROM"],
    ["FROM base\nONBUILD RUN x\n", "dockerfile:2", "ONBUILD is not supported"],
    ["FROM base\nCOPY --from=builder /a /b\n", "dockerfile:2", "--from is not supported"],
    ["FROM base\nADD https://example.com/x /x\n", "dockerfile:2", "from a URL"],
    ["FROM base\nCOPY ../secret /x\n", "dockerfile:2", "outside the context"],
    ["FROM base\nCOPY *.txt /x/\n", "dockerfile:2", "wildcards"],
    ["FROM base\nRUN --mount=type=cache true\n", "dockerfile:2", "RUN options"],
    ["FROM base\nEXPOSE 70000\n", "dockerfile:2", "a port 1 to 65535"],
    ["FROM base\nFROBNICATE\n", "dockerfile:2", "FROBNICATE is not a supported instruction"],
    ["# only a comment\n", "dockerfile", "no FROM"]
  ])("refuses %j at its line", (text, path, words) => {
    const found = issues(text)
    expect(found[0]?.path).toBe(path)
    expect(found[0]?.message).toContain(words)
  })

  it("substitutes like Docker", () => {
    const vars = { A: "a", E: "" }
    expect(substitute("$A ${A} ${B:-b} ${E:-e} ${A:+set} ${B:+set} \\$A", vars)).toBe("a a b e set  $A")
  })
})
