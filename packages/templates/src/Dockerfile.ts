/**
 * The single-stage Dockerfile subset templates take (docs/contract.md#templates), read into a
 * template build: `FROM` (an image, `base`, `debian` or a template), then one build step per
 * instruction, in order, each cached like any step (a changed line rebuilds from there on):
 * `RUN` (shell form through `SHELL`, or exec form), `COPY`/`ADD` (local files of the context),
 * `ENV`, `WORKDIR`, `USER`, `CMD`, `ENTRYPOINT`, `EXPOSE`, `SHELL`; `ARG` from `build_args`
 * (substituted like Docker's `$NAME`/`${NAME}`/`${NAME:-default}` and given to `RUN` as env);
 * `LABEL` is read and dropped; `HEALTHCHECK CMD` is the `ready_cmd`. Anything else is an issue
 * naming its line (`dockerfile:<line>`). Pure.
 */
import type { TemplateStep } from "@svc/domain/Template"
import { posix } from "node:path"

export interface DockerfileIssue {
  readonly path: string
  readonly message: string
}

/** A step the Dockerfile adds beyond the API's own (`@svc/host-protocol/Images` BuildStep). */
export type DockerfileStep =
  | TemplateStep
  | {
    readonly run: string
    readonly argv?: ReadonlyArray<string>
    /** The build args, for this command only (they do not stay in the image's env). */
    readonly args?: Readonly<Record<string, string>>
  }
  | { readonly copy: { readonly sources: ReadonlyArray<string>; readonly dest: string; readonly chown?: string } }
  | { readonly workdir: string }
  | { readonly user: string }
  | { readonly cmd: ReadonlyArray<string> }
  | { readonly entrypoint: ReadonlyArray<string> }
  | { readonly expose: ReadonlyArray<number> }
  | { readonly shell: ReadonlyArray<string> }

export interface ParsedDockerfile {
  readonly from: string
  readonly steps: ReadonlyArray<DockerfileStep>
  /** `HEALTHCHECK CMD`, as a shell command line; null for `HEALTHCHECK NONE`; absent when none. */
  readonly readyCmd?: string | null
  /** Whether a `COPY`/`ADD` needs the context. */
  readonly usesContext: boolean
}

interface Line {
  readonly number: number
  readonly instruction: string
  readonly rest: string
}

/** Logical lines: comments and blank lines dropped, `\` continuations joined. */
const logicalLines = (text: string): Array<Line> => {
  const out: Array<Line> = []
  const raw = text.replace(/\r\n?/g, "\n").split("\n")
  let current: { number: number; text: string } | undefined
  for (const [index, line] of raw.entries()) {
    const trimmed = line.trim()
    if (current === undefined) {
      if (trimmed === "" || trimmed.startsWith("#")) continue
      current = { number: index + 1, text: "" }
    } else if (trimmed.startsWith("#")) continue
    if (/\\\s*$/.test(line)) {
      current.text += line.replace(/\\\s*$/, "") + " "
      continue
    }
    current.text += line
    const match = /^\s*(\S+)\s*([\s\S]*)$/.exec(current.text)
    if (match !== null) {
      out.push({ number: current.number, instruction: match[1]!.toUpperCase(), rest: match[2]!.trim() })
    }
    current = undefined
  }
  if (current !== undefined && current.text.trim() !== "") {
    const match = /^\s*(\S+)\s*([\s\S]*)$/.exec(current.text)
    if (match !== null) {
      out.push({ number: current.number, instruction: match[1]!.toUpperCase(), rest: match[2]!.trim() })
    }
  }
  return out
}

/** `$NAME`, `${NAME}`, `${NAME:-default}`, `${NAME:+alt}`; `\$` stays a dollar. */
export const substitute = (text: string, vars: Readonly<Record<string, string>>): string =>
  text.replace(
    /\\\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([-+])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)/g,
    (all, braced, op, word, bare) => {
      if (all === "\\$") return "$"
      const name = (braced ?? bare) as string
      const value = vars[name]
      if (op === "-") return value !== undefined && value !== "" ? value : (word as string)
      if (op === "+") return value !== undefined && value !== "" ? (word as string) : ""
      return value ?? ""
    }
  )

/** A JSON array of strings (exec form), or undefined when the text is not one. */
const jsonArray = (text: string): ReadonlyArray<string> | undefined => {
  if (!text.startsWith("[")) return undefined
  try {
    const value = JSON.parse(text) as unknown
    return Array.isArray(value) && value.every((v) => typeof v === "string") ? value as Array<string> : undefined
  } catch {
    return undefined
  }
}

/** Whitespace-separated words; double or single quotes group (inside a word too: `B="two words"`). */
const words = (text: string): Array<string> =>
  [...text.matchAll(/(?:"(?:[^"\\]|\\.)*"|'[^']*'|[^\s"'])+/g)].map((m) =>
    m[0].replace(
      /"((?:[^"\\]|\\.)*)"|'([^']*)'/g,
      (_all, dq: string | undefined, sq: string | undefined) => dq !== undefined ? dq.replace(/\\(.)/g, "$1") : sq ?? ""
    )
  )

/** `ENV a=b c="d e"` or the legacy `ENV a b c`. */
const envPairs = (text: string): Record<string, string> | undefined => {
  const parts = words(text)
  if (parts.length === 0) return undefined
  if (!parts[0]!.includes("=")) {
    const space = text.search(/\s/)
    if (space < 0) return undefined
    return { [parts[0]!]: text.slice(space).trim() }
  }
  const env: Record<string, string> = {}
  for (const part of parts) {
    const eq = part.indexOf("=")
    if (eq <= 0) return undefined
    env[part.slice(0, eq)] = part.slice(eq + 1)
  }
  return env
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/
const UNSUPPORTED: Readonly<Record<string, string>> = {
  VOLUME: "VOLUME is not supported (a sandbox's volumes are attached at create)",
  ONBUILD: "ONBUILD is not supported",
  STOPSIGNAL: "STOPSIGNAL is not supported",
  MAINTAINER: "MAINTAINER is not supported (use LABEL)"
}

/** Reads a Dockerfile; its build, or the issues (each naming its line). */
export const parseDockerfile = (
  text: string,
  buildArgs: Readonly<Record<string, string>>
): { readonly _tag: "Parsed"; readonly value: ParsedDockerfile } | {
  readonly _tag: "Issues"
  readonly issues: ReadonlyArray<DockerfileIssue>
} => {
  const issues: Array<DockerfileIssue> = []
  const issue = (line: Line, message: string) => issues.push({ path: `dockerfile:${line.number}`, message })
  const args: Record<string, string> = {}
  const env: Record<string, string> = {}
  const vars = () => ({ ...args, ...env })
  const steps: Array<DockerfileStep> = []
  let from: string | undefined
  let readyCmd: string | null | undefined
  let shell: ReadonlyArray<string> = ["/bin/sh", "-c"]
  let workdir = "/"
  let usesContext = false
  const argValue = (spec: string, line: Line) => {
    const eq = spec.indexOf("=")
    const name = eq >= 0 ? spec.slice(0, eq) : spec
    if (!ENV_NAME.test(name)) {
      issue(line, `ARG ${JSON.stringify(name)} is not a valid name`)
      return
    }
    const fallback = eq >= 0 ? substitute(spec.slice(eq + 1).replace(/^"(.*)"$/, "$1"), vars()) : undefined
    const value = buildArgs[name] ?? fallback
    if (value !== undefined) args[name] = value
  }
  const commandLine = (rest: string): ReadonlyArray<string> => jsonArray(rest) ?? [...shell, rest]

  for (const line of logicalLines(text)) {
    const { instruction } = line
    if (from === undefined && instruction !== "FROM" && instruction !== "ARG") {
      issue(line, `${instruction} before FROM`)
      continue
    }
    switch (instruction) {
      case "FROM": {
        if (from !== undefined) {
          issue(line, "a second FROM: only single-stage Dockerfiles are supported")
          break
        }
        const parts = words(line.rest)
        if (parts.some((p) => p.startsWith("--"))) issue(line, "FROM options (--platform) are not supported")
        if (parts.length === 3 && parts[1]!.toUpperCase() === "AS") parts.splice(1, 2)
        if (parts.length !== 1) issue(line, "FROM takes one image, base, debian or template")
        from = substitute(parts[0] ?? "", args)
        if (from === "") issue(line, "FROM names nothing")
        break
      }
      case "ARG":
        for (const spec of words(line.rest)) argValue(spec, line)
        if (line.rest === "") issue(line, "ARG names nothing")
        break
      case "RUN": {
        if (line.rest.startsWith("--")) {
          issue(line, "RUN options (--mount, --network) are not supported")
          break
        }
        const exec = jsonArray(line.rest)
        // The build args reach the command as env (Docker's ARG in RUN), not the image's env.
        const withArgs = Object.keys(args).length > 0 ? { args: { ...args } } : {}
        steps.push(
          exec !== undefined
            ? { run: exec.join(" "), argv: exec, ...withArgs }
            : { run: line.rest, argv: [...shell, line.rest], ...withArgs }
        )
        break
      }
      case "COPY":
      case "ADD": {
        const parts = words(substitute(line.rest, vars()))
        let chown: string | undefined
        const rest: Array<string> = []
        let bad = false
        for (const part of parts) {
          if (part.startsWith("--chown=")) chown = part.slice("--chown=".length)
          else if (part.startsWith("--")) {
            issue(line, `${instruction} ${part.split("=")[0]} is not supported`)
            bad = true
          } else rest.push(part)
        }
        if (bad) break
        const list = jsonArray(line.rest) ?? rest
        if (list.length < 2) {
          issue(line, `${instruction} takes sources and a destination`)
          break
        }
        const sources = list.slice(0, -1)
        let dest = list.at(-1)!
        if (sources.some((s) => /^[a-z][a-z0-9+.-]*:\/\//i.test(s))) {
          issue(line, `${instruction} from a URL is not supported: only local files of the context`)
          break
        }
        if (sources.some((s) => /[*?[]/.test(s))) {
          issue(line, `${instruction} with wildcards is not supported: name files or folders`)
          break
        }
        const escapes = sources.find((s) => s.split("/").includes("..") || s.startsWith("/"))
        if (escapes !== undefined) {
          issue(line, `${instruction} source ${JSON.stringify(escapes)} is outside the context`)
          break
        }
        if (chown !== undefined && !/^\d{1,5}(?::\d{1,5})?$/.test(chown)) {
          issue(line, "--chown takes a numeric uid[:gid]")
          break
        }
        // posix.join keeps a trailing slash: a destination folder stays one.
        if (!dest.startsWith("/")) dest = posix.join(workdir, dest)
        usesContext = true
        steps.push({ copy: { sources, dest, ...(chown !== undefined ? { chown } : {}) } })
        break
      }
      case "ENV": {
        const pairs = envPairs(line.rest)
        if (pairs === undefined || !Object.keys(pairs).every((k) => ENV_NAME.test(k))) {
          issue(line, "ENV takes NAME=value pairs")
          break
        }
        const resolved: Record<string, string> = {}
        for (const [name, value] of Object.entries(pairs)) {
          resolved[name] = substitute(value, vars())
          env[name] = resolved[name]
        }
        steps.push({ env: resolved })
        break
      }
      case "WORKDIR": {
        const path = substitute(line.rest, vars()).replace(/^"(.*)"$/, "$1")
        if (path === "") {
          issue(line, "WORKDIR names no folder")
          break
        }
        workdir = posix.resolve(workdir, path)
        steps.push({ workdir })
        break
      }
      case "USER": {
        const user = substitute(line.rest, vars())
        if (!/^[A-Za-z0-9_.-]+(?::[A-Za-z0-9_.-]+)?$/.test(user)) {
          issue(line, "USER takes a user[:group]")
          break
        }
        steps.push({ user })
        break
      }
      case "CMD":
        steps.push({ cmd: commandLine(line.rest) })
        break
      case "ENTRYPOINT":
        steps.push({ entrypoint: commandLine(line.rest) })
        break
      case "EXPOSE": {
        const ports: Array<number> = []
        for (const spec of words(substitute(line.rest, vars()))) {
          const m = /^(\d{1,5})(?:\/(tcp|udp))?$/i.exec(spec)
          if (m === null || Number(m[1]) < 1 || Number(m[1]) > 65535) issue(line, `EXPOSE ${spec}: a port 1 to 65535`)
          else if ((m[2] ?? "tcp").toLowerCase() === "tcp") ports.push(Number(m[1]))
        }
        steps.push({ expose: ports })
        break
      }
      case "SHELL": {
        const argv = jsonArray(line.rest)
        if (argv === undefined || argv.length === 0) {
          issue(line, "SHELL takes a JSON array")
          break
        }
        shell = argv
        steps.push({ shell: argv })
        break
      }
      case "LABEL":
        break
      case "HEALTHCHECK": {
        const rest = line.rest
        if (/^NONE$/i.test(rest)) {
          readyCmd = null
          break
        }
        const m = /^((?:--\S+\s+)*)CMD\s+([\s\S]+)$/i.exec(rest)
        if (m === null) {
          issue(line, "HEALTHCHECK takes CMD <command> or NONE")
          break
        }
        const argv = jsonArray(m[2]!.trim())
        readyCmd = argv !== undefined
          ? argv.map((a) => /^[A-Za-z0-9_@%+=:,./-]+$/.test(a) ? a : `'${a.replaceAll("'", `'"'"'`)}'`).join(" ")
          : m[2]!.trim()
        break
      }
      default:
        issue(line, UNSUPPORTED[instruction] ?? `${instruction} is not a supported instruction`)
    }
  }
  if (from === undefined && issues.length === 0) issues.push({ path: "dockerfile", message: "no FROM" })
  if (issues.length > 0) return { _tag: "Issues", issues }
  return {
    _tag: "Parsed",
    value: { from: from!, steps, ...(readyCmd !== undefined ? { readyCmd } : {}), usesContext }
  }
}
