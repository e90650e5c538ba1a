/**
 * What an image says about how to run it (its config blob's `config`), mapped as the contract
 * maps it: `Env` the template's env, `WorkingDir` the default cwd of execs, `User` the user they
 * run as (a name looked up in the image's `/etc/passwd` and `/etc/group`), `Entrypoint` + `Cmd`
 * the `start_cmd`, `ExposedPorts` the default exposed ports. Pure.
 */
import { Result, Schema } from "effect"

export const ImageConfigBlob = Schema.Struct({
  architecture: Schema.optionalKey(Schema.String),
  os: Schema.optionalKey(Schema.String),
  config: Schema.optionalKey(Schema.NullOr(Schema.Struct({
    Env: Schema.optionalKey(Schema.NullOr(Schema.Array(Schema.String))),
    WorkingDir: Schema.optionalKey(Schema.NullOr(Schema.String)),
    User: Schema.optionalKey(Schema.NullOr(Schema.String)),
    Entrypoint: Schema.optionalKey(Schema.NullOr(Schema.Array(Schema.String))),
    Cmd: Schema.optionalKey(Schema.NullOr(Schema.Array(Schema.String))),
    ExposedPorts: Schema.optionalKey(Schema.NullOr(Schema.Record(Schema.String, Schema.Unknown)))
  }))),
  rootfs: Schema.optionalKey(Schema.Struct({ diff_ids: Schema.optionalKey(Schema.Array(Schema.String)) }))
})
export type ImageConfigBlob = typeof ImageConfigBlob.Type

/** How a sandbox of the image runs. */
export interface RunConfig {
  readonly env: Readonly<Record<string, string>>
  readonly workdir: string | null
  /** `uid:gid`, numeric, or null (root). */
  readonly user: string | null
  /** Entrypoint + Cmd as one shell command line, or null. */
  readonly startCmd: string | null
  readonly exposedPorts: ReadonlyArray<number>
}

/** One argument quoted for `/bin/sh -c` (left bare when it is plainly safe). */
export const shellQuote = (arg: string): string =>
  /^[A-Za-z0-9_@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replaceAll("'", `'"'"'`)}'`

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/

/** `name=value` lines; a malformed name is skipped (a sandbox's env takes only portable names). */
export const envOf = (lines: ReadonlyArray<string>): Record<string, string> => {
  const env: Record<string, string> = {}
  for (const line of lines) {
    const eq = line.indexOf("=")
    const name = eq >= 0 ? line.slice(0, eq) : line
    if (!ENV_NAME.test(name) || line.includes("\0")) continue
    env[name] = eq >= 0 ? line.slice(eq + 1) : ""
  }
  return env
}

const lookup = (table: string | null | undefined, name: string): ReadonlyArray<string> | undefined =>
  (table ?? "").split("\n").map((line) => line.split(":")).find((fields) => fields[0] === name)

/**
 * `User` (`name`, `uid`, `name:group`, `uid:gid`) as numeric `uid:gid`: names from the image's
 * passwd and group files; a bare uid takes its passwd entry's group, or its own number.
 */
export const resolveUser = (
  user: string,
  passwd: string | null | undefined,
  group: string | null | undefined
): Result.Result<string, string> => {
  const [userPart = "", groupPart] = user.split(":", 2)
  const inRange = (n: number) => Number.isInteger(n) && n >= 0 && n <= 65535
  let uid: number
  let gid: number | undefined
  if (/^\d+$/.test(userPart)) {
    uid = Number(userPart)
    const entry = (passwd ?? "").split("\n").map((l) => l.split(":")).find((f) => f[2] === userPart)
    if (entry !== undefined) gid = Number(entry[3])
  } else {
    const entry = lookup(passwd, userPart)
    if (entry === undefined) {
      return Result.fail(`the image's user ${JSON.stringify(userPart)} is not in its /etc/passwd`)
    }
    uid = Number(entry[2])
    gid = Number(entry[3])
  }
  if (groupPart !== undefined && groupPart !== "") {
    if (/^\d+$/.test(groupPart)) gid = Number(groupPart)
    else {
      const entry = lookup(group, groupPart)
      if (entry === undefined) {
        return Result.fail(`the image's group ${JSON.stringify(groupPart)} is not in its /etc/group`)
      }
      gid = Number(entry[2])
    }
  }
  gid ??= uid
  if (!inRange(uid) || !inRange(gid)) return Result.fail(`the image's user ${user} is outside 0..65535`)
  return Result.succeed(`${uid}:${gid}`)
}

/** The ports of `ExposedPorts` (`8080/tcp`; udp ones are not forwarded, so left out). */
export const exposedPortsOf = (ports: Readonly<Record<string, unknown>> | null | undefined): ReadonlyArray<number> =>
  Object.keys(ports ?? {})
    .map((key) => /^(\d{1,5})(?:\/tcp)?$/.exec(key))
    .filter((m): m is RegExpExecArray => m !== null)
    .map((m) => Number(m[1]))
    .filter((port) => port >= 1 && port <= 65535)
    .slice(0, 64)

/** The run config of an image, users resolved against its account files. */
export const runConfigOf = (
  blob: ImageConfigBlob,
  accounts: { readonly passwd?: string | null | undefined; readonly group?: string | null | undefined }
): Result.Result<RunConfig, string> => {
  const config = blob.config ?? {}
  const argv = [...(config.Entrypoint ?? []), ...(config.Cmd ?? [])]
  let user: string | null = null
  const named = config.User ?? ""
  if (named !== "" && named !== "root" && named !== "0" && named !== "0:0") {
    const resolved = resolveUser(named, accounts.passwd, accounts.group)
    if (Result.isFailure(resolved)) return Result.fail(resolved.failure)
    user = resolved.success === "0:0" ? null : resolved.success
  }
  const workdir = config.WorkingDir ?? ""
  return Result.succeed({
    env: envOf(config.Env ?? []),
    workdir: workdir.startsWith("/") ? workdir : workdir === "" ? null : `/${workdir}`,
    user,
    startCmd: argv.length > 0 ? argv.map(shellQuote).join(" ") : null,
    exposedPorts: exposedPortsOf(config.ExposedPorts)
  })
}
