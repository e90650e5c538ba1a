/**
 * `svc sandbox create|list|get|exec|stop|start|delete|files read|write|ls|stat|mkdir|mv|rm|push|pull|watch|stats|expose|network|
 * secrets bind|snapshot|timeout` (and `spawn|ps|logs|kill|wait|stdin|terminal`, `Processes.ts`; `logs` without a pid
 * and `metrics`, `SandboxTelemetry.ts`): a
 * client of the /v1 API for users.
 *
 * Built on the SDK's `Svc` (`@svc/sdk`). Credentials: `SVC_API_KEY` and `SVC_API_URL` (default
 * http://127.0.0.1:8080), else `.svc/dev-credentials.json` (`{base_url, api_key}`, written for
 * the dev stack). API errors print `error <code>: <message>` and exit 1; `exec` exits with the
 * command's exit code. `create`, `get` and `delete` print the JSON record (`--json` is accepted
 * everywhere for scripts); waits show each state on stderr.
 *
 *   svc sandbox create --name web --cpu 2 --ram-mb 1024 --env PORT=8080 --wait
 *   svc sandbox list --state running,stopped
 *   svc sandbox exec sbx_... -- sh -c 'echo hi'
 *   svc sandbox create --port 8080 --wait; svc sandbox expose sbx_... 8080
 *   svc sandbox create --allow pypi.org --allow '*.pythonhosted.org' --secret sec_...
 *   svc sandbox network sbx_... --allow example.com --deny 203.0.113.0/24
 *   svc sandbox secrets bind sbx_... sec_...
 *   svc sandbox snapshot sbx_... --name my-env --wait
 *   svc sandbox fork sbx_... --count 3 --wait
 *   svc sandbox stop sbx_... ; svc sandbox start sbx_...      # each waits for its state
 *   svc sandbox create --idle-timeout-s 600 --auto-resume ; svc sandbox timeout sbx_... --timeout-s 3600
 *   echo hi | svc sandbox files write sbx_... /root/hi.txt ; svc sandbox files read sbx_... /root/hi.txt
 *   svc sandbox files mkdir sbx_... /srv/out ; svc sandbox files mv sbx_... /srv/a /srv/b ; svc sandbox files rm -r sbx_... /srv/out
 *   svc sandbox files push sbx_... ./src /srv/app ; svc sandbox files pull sbx_... /srv/app/dist ./dist ; svc sandbox files watch sbx_... /srv/app
 */
import type { CreateSandboxParams, SandboxState } from "@svc/sdk"
import { Console, Effect, Option } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import * as Fs from "node:fs"
import { call, CliError, progress } from "../Client.ts"
import { contextCommands } from "./Contexts.ts"
import { timeout } from "./Lifecycle.ts"
import { processCommands } from "./Processes.ts"
import { metrics } from "./SandboxTelemetry.ts"
import { followBuild } from "./Templates.ts"
import { parseVolumeFlag } from "./Volumes.ts"

const print = (value: unknown) => Console.log(JSON.stringify(value, null, 2))

const sandboxId = Argument.String("sandbox-id").pipe(Argument.withDescription("The sandbox's id (sbx_...)"))
const json = Flag.Boolean("json").pipe(Flag.withDescription("Print the API's JSON"), Flag.withDefault(false))

const optionalField = <A>(
  name: string,
  value: Option.Option<A>
) => (Option.isSome(value) ? { [name]: value.value } : {})

const allowFlag = Flag.String("allow").pipe(
  Flag.withDescription("Egress allowed to this CIDR, address or domain (*.example.com); repeatable"),
  Flag.atLeast(0)
)
const denyFlag = Flag.String("deny").pipe(
  Flag.withDescription("Egress denied to this CIDR, address or domain; repeatable; wins over --allow"),
  Flag.atLeast(0)
)

const create = Command.make(
  "create",
  {
    name: Flag.String("name").pipe(Flag.optional),
    template: Flag.String("template").pipe(Flag.optional),
    region: Flag.String("region").pipe(Flag.optional),
    parent: Flag.String("parent").pipe(Flag.withDescription("Parent sandbox id"), Flag.optional),
    cpu: Flag.Int("cpu").pipe(Flag.optional),
    ramMb: Flag.Int("ram-mb").pipe(Flag.optional),
    diskGb: Flag.Int("disk-gb").pipe(Flag.optional),
    env: Flag.KeyValuePair("env").pipe(Flag.withDescription("KEY=VALUE, repeatable"), Flag.optional),
    type: Flag.Literals("type", ["persistent", "ephemeral"]).pipe(Flag.optional),
    timeoutS: Flag.Int("timeout-s").pipe(
      Flag.withDescription("Stop it after this many seconds running"),
      Flag.optional
    ),
    idleTimeoutS: Flag.Int("idle-timeout-s").pipe(
      Flag.withDescription("Stop it after this many seconds without activity (calls, processes, terminals)"),
      Flag.optional
    ),
    onTimeout: Flag.Literals("on-timeout", ["stop", "delete"]).pipe(
      Flag.withDescription("What --timeout-s and --idle-timeout-s do (default stop)"),
      Flag.optional
    ),
    autoDeleteS: Flag.Int("auto-delete-s").pipe(
      Flag.withDescription("Delete it this many seconds after it stopped"),
      Flag.optional
    ),
    autoResume: Flag.Boolean("auto-resume").pipe(
      Flag.withDescription("A call on it while stopped starts it (instead of 409)"),
      Flag.withDefault(false)
    ),
    ports: Flag.Int("port").pipe(
      Flag.withDescription("A port to expose (exposed_ports), repeatable; `svc sandbox expose` opens it"),
      Flag.atLeast(0)
    ),
    allow: allowFlag,
    deny: denyFlag,
    secret: Flag.String("secret").pipe(Flag.withDescription("Bind this secret (sec_...); repeatable"), Flag.atLeast(0)),
    volume: Flag.String("volume").pipe(
      Flag.withDescription("Attach a volume: VOLUME_ID:MOUNT_PATH[:SUBPATH][:ro|rw]; repeatable"),
      Flag.atLeast(0)
    ),
    wait: Flag.Boolean("wait").pipe(
      Flag.withDescription("Wait until it is running (exit 1 if it ends in error)"),
      Flag.withDefault(false)
    ),
    json
  },
  Effect.fn(function*(o) {
    const params: CreateSandboxParams = {
      ...optionalField("name", o.name),
      ...optionalField("template", o.template),
      ...optionalField("region", o.region),
      ...optionalField("parent_id", o.parent),
      ...optionalField("cpu", o.cpu),
      ...optionalField("ram_mb", o.ramMb),
      ...optionalField("disk_gb", o.diskGb),
      ...optionalField("env", o.env),
      ...optionalField("type", o.type),
      ...optionalField("timeout_s", o.timeoutS),
      ...optionalField("idle_timeout_s", o.idleTimeoutS),
      ...optionalField("on_timeout", o.onTimeout),
      ...optionalField("auto_delete_s", o.autoDeleteS),
      ...(o.autoResume ? { auto_resume: true } : {}),
      ...(o.ports.length > 0 ? { exposed_ports: o.ports } : {}),
      ...(o.secret.length > 0 ? { secrets: o.secret } : {}),
      ...(o.volume.length > 0 ? { volumes: o.volume.map(parseVolumeFlag) } : {}),
      ...(o.allow.length > 0 || o.deny.length > 0 ? { network: { allow_out: o.allow, deny_out: o.deny } } : {})
    }
    const sandbox = yield* call((svc) =>
      svc.sandboxes.create(params, { wait: o.wait, onProgress: progress("waiting for running") })
    )
    yield* print(sandbox.record)
  })
).pipe(Command.withDescription("Create a sandbox (201: pending; --wait for running, its states on stderr)"))

const list = Command.make(
  "list",
  {
    state: Flag.String("state").pipe(Flag.withDescription("One state or a comma-separated list"), Flag.optional),
    limit: Flag.Int("limit").pipe(Flag.optional),
    offset: Flag.Int("offset").pipe(Flag.optional),
    all: Flag.Boolean("all").pipe(Flag.withDescription("Every row (paginated=false)"), Flag.withDefault(false)),
    json
  },
  Effect.fn(function*(o) {
    const page = yield* call((svc) =>
      svc.sandboxes.list({
        state: Option.getOrUndefined(o.state)?.split(",") as Array<SandboxState> | undefined,
        limit: Option.getOrUndefined(o.limit),
        offset: Option.getOrUndefined(o.offset),
        ...(o.all ? { paginated: false } : {})
      })
    )
    if (o.json) return yield* print({ ...page, rows: page.rows.map((r) => r.record) })
    for (const { record: r } of page.rows) {
      yield* Console.log([r.id, r.state.padEnd(8), r.region, r.internalIp ?? "-", r.name].join("  "))
    }
    yield* Console.log(`${page.rows.length} of ${page.total}${page.has_more ? " (more: --offset / --all)" : ""}`)
  })
).pipe(Command.withDescription("List the org's sandboxes, newest first"), Command.withAlias("ls"))

const get = Command.make(
  "get",
  { sandboxId, json },
  ({ sandboxId }) => Effect.flatMap(call((svc) => svc.sandboxes.get(sandboxId)), (s) => print(s.record))
)
  .pipe(Command.withDescription("Show one sandbox's record"))

const exec = Command.make(
  "exec",
  {
    sandboxId,
    cmd: Argument.String("cmd").pipe(
      Argument.variadic({ min: 1 }),
      Argument.withDescription("The program and its arguments (after --)")
    ),
    cwd: Flag.String("cwd").pipe(Flag.optional),
    timeoutMs: Flag.Int("timeout-ms").pipe(Flag.optional),
    json
  },
  Effect.fn(function*(o) {
    const options = { cwd: Option.getOrUndefined(o.cwd), timeoutMs: Option.getOrUndefined(o.timeoutMs) }
    if (o.json) {
      const result = yield* call(async (svc) => (await svc.sandboxes.get(o.sandboxId)).exec(o.cmd, options))
      yield* print(result)
      process.exitCode = result.exit_code
      return
    }
    // The output as the command writes it (streamed exec), not once it ended.
    const result = yield* call(async (svc) =>
      (await svc.sandboxes.get(o.sandboxId)).exec(o.cmd, {
        ...options,
        onStdout: (text) => process.stdout.write(text),
        onStderr: (text) => process.stderr.write(text)
      })
    )
    process.exitCode = result.exit_code
  })
).pipe(Command.withDescription("Run a command in a running sandbox; exits with its exit code"))

const remove = Command.make(
  "delete",
  {
    sandboxId,
    wait: Flag.Boolean("wait").pipe(Flag.withDescription("Wait until it is deleted"), Flag.withDefault(false)),
    json
  },
  Effect.fn(function*(o) {
    const sandbox = yield* call(async (svc) =>
      (await svc.sandboxes.get(o.sandboxId)).delete({ wait: o.wait, onProgress: progress("waiting for deleted") })
    )
    yield* print(sandbox.record)
  })
).pipe(Command.withDescription("Delete a sandbox and its children"))

const lifecycle = (name: "stop" | "start", wanted: string) =>
  Command.make(
    name,
    {
      sandboxId,
      wait: Flag.Boolean("wait").pipe(
        Flag.withDescription(`Wait until it is ${wanted} (default; --no-wait answers at once)`),
        Flag.withDefault(true)
      ),
      json
    },
    Effect.fn(function*(o) {
      const sandbox = yield* call(async (svc) =>
        (await svc.sandboxes.get(o.sandboxId))[name]({ wait: o.wait, onProgress: progress(`waiting for ${wanted}`) })
      )
      if (o.json) return yield* print(sandbox.record)
      yield* Console.log(`${sandbox.id}  ${sandbox.state}`)
    })
  )

const stop = lifecycle("stop", "stopped").pipe(
  Command.withDescription("Stop a running sandbox (its files are kept; `start` runs it again)")
)
const start = lifecycle("start", "running").pipe(Command.withDescription("Start a stopped sandbox again"))

const pathArg = Argument.String("path").pipe(Argument.withDescription("An absolute path inside the sandbox"))

const filesRead = Command.make(
  "read",
  { sandboxId, path: pathArg },
  Effect.fn(function*(o) {
    const bytes = yield* call(async (svc) => (await svc.sandboxes.get(o.sandboxId)).files.read(o.path))
    yield* Effect.promise(() => new Promise<void>((resolve) => process.stdout.write(bytes, () => resolve())))
  })
).pipe(Command.withDescription("Print a file's bytes as they are (to stdout)"))

const filesWrite = Command.make(
  "write",
  {
    sandboxId,
    path: pathArg,
    from: Flag.String("from").pipe(
      Flag.withDescription("Upload this local file (default: this command's stdin)"),
      Flag.optional
    ),
    json
  },
  Effect.fn(function*(o) {
    const data = yield* Effect.tryPromise({
      try: async () => {
        if (Option.isSome(o.from)) return new Uint8Array(await Fs.promises.readFile(o.from.value))
        const parts: Array<Buffer> = []
        for await (const part of process.stdin) parts.push(part as Buffer)
        return new Uint8Array(Buffer.concat(parts))
      },
      catch: (e) => new CliError({ message: `error: cannot read ${Option.getOrElse(o.from, () => "stdin")}: ${e}` })
    })
    yield* call(async (svc) => (await svc.sandboxes.get(o.sandboxId)).files.write(o.path, data))
    if (o.json) return yield* print({ path: o.path, bytes: data.length })
    yield* Console.error(`${data.length} bytes written to ${o.path}`)
  })
).pipe(Command.withDescription("Write a file from stdin or --from (replaced once every byte arrived; 100 MiB at most)"))

const filesList = Command.make(
  "ls",
  { sandboxId, path: pathArg, json },
  Effect.fn(function*(o) {
    const entries = yield* call(async (svc) => (await svc.sandboxes.get(o.sandboxId)).files.list(o.path))
    if (o.json) return yield* print({ entries })
    for (const e of entries) {
      yield* Console.log([e.type.padEnd(7), String(e.size).padStart(10), e.mtime, e.name].join("  "))
    }
  })
).pipe(Command.withDescription("List a folder's entries"))

/** One line of a stat: type, mode, owner, size, mtime, path (and a link's target). */
const statLine = (
  info: {
    type: string
    mode: string
    uid: number
    gid: number
    size: number
    mtime: string
    path: string
    target: string | null
  }
) =>
  [info.type.padEnd(7), info.mode, `${info.uid}:${info.gid}`, String(info.size).padStart(10), info.mtime, info.path]
    .join("  ") + (info.target !== null ? ` -> ${info.target}` : "")

const filesStat = Command.make(
  "stat",
  { sandboxId, path: pathArg, json },
  Effect.fn(function*(o) {
    const info = yield* call(async (svc) => (await svc.sandboxes.get(o.sandboxId)).files.stat(o.path))
    yield* o.json ? print(info) : Console.log(statLine(info))
  })
).pipe(Command.withDescription("An entry's type, mode, owner, size and mtime (a symlink is not followed)"))

const filesMkdir = Command.make(
  "mkdir",
  {
    sandboxId,
    path: pathArg,
    noParents: Flag.Boolean("no-parents").pipe(
      Flag.withDescription("Refuse (409) when the folder exists or a parent is missing"),
      Flag.withDefault(false)
    ),
    mode: Flag.String("mode").pipe(Flag.withDescription("Its mode in octal (default 0755)"), Flag.optional),
    json
  },
  Effect.fn(function*(o) {
    const info = yield* call(async (svc) =>
      (await svc.sandboxes.get(o.sandboxId)).files.mkdir(o.path, {
        parents: !o.noParents,
        ...optionalField("mode", o.mode)
      })
    )
    yield* o.json ? print(info) : Console.log(statLine(info))
  })
).pipe(Command.withDescription("Make a folder (and its parents)"))

const filesMove = Command.make(
  "mv",
  {
    sandboxId,
    from: Argument.String("from").pipe(Argument.withDescription("The entry to move (absolute)")),
    to: Argument.String("to").pipe(Argument.withDescription("Its new path (absolute)")),
    overwrite: Flag.Boolean("overwrite").pipe(
      Flag.withDescription("Replace what is at `to` (else 409 when something is there)"),
      Flag.withDefault(false)
    ),
    json
  },
  Effect.fn(function*(o) {
    const info = yield* call(async (svc) =>
      (await svc.sandboxes.get(o.sandboxId)).files.move(o.from, o.to, { overwrite: o.overwrite })
    )
    yield* o.json ? print(info) : Console.log(statLine(info))
  })
).pipe(Command.withDescription("Move or rename an entry"))

const filesRemove = Command.make(
  "rm",
  {
    sandboxId,
    path: pathArg,
    recursive: Flag.Boolean("recursive").pipe(
      Flag.withAlias("r"),
      Flag.withDescription("Remove a folder with everything in it (else 409 unless it is empty)"),
      Flag.withDefault(false)
    )
  },
  Effect.fn(function*(o) {
    yield* call(async (svc) => (await svc.sandboxes.get(o.sandboxId)).files.remove(o.path, { recursive: o.recursive }))
    yield* Console.error(`${o.path} removed`)
  })
).pipe(Command.withDescription("Remove an entry (a symlink, not its target)"))

const filesPush = Command.make(
  "push",
  {
    sandboxId,
    local: Argument.String("local-folder").pipe(Argument.withDescription("A folder on this machine")),
    remote: Argument.String("remote").pipe(Argument.withDescription("Where it lands in the sandbox (absolute)"))
  },
  Effect.fn(function*(o) {
    yield* call(async (svc) => (await svc.sandboxes.get(o.sandboxId)).files.upload(o.local, o.remote))
    yield* Console.error(`${o.local} -> ${o.remote}`)
  })
).pipe(
  Command.withDescription("Upload a local folder into the sandbox (streamed as a tar; merged into a folder there)")
)

const filesPull = Command.make(
  "pull",
  {
    sandboxId,
    remote: Argument.String("remote").pipe(Argument.withDescription("A folder in the sandbox (absolute)")),
    local: Argument.String("local-folder").pipe(Argument.withDescription("Where it lands on this machine"))
  },
  Effect.fn(function*(o) {
    const count = yield* call(async (svc) => (await svc.sandboxes.get(o.sandboxId)).files.download(o.remote, o.local))
    yield* Console.error(`${o.remote} -> ${o.local} (${count} entries)`)
  })
).pipe(Command.withDescription("Download a folder of the sandbox to a local folder (streamed as a tar)"))

const filesWatch = Command.make(
  "watch",
  {
    sandboxId,
    path: pathArg,
    noRecursive: Flag.Boolean("no-recursive").pipe(
      Flag.withDescription("Only the folder itself, not the folders below it"),
      Flag.withDefault(false)
    ),
    json
  },
  Effect.fn(function*(o) {
    yield* call(async (svc) => {
      const sandbox = await svc.sandboxes.get(o.sandboxId)
      for await (const event of sandbox.files.watch(o.path, { recursive: !o.noRecursive })) {
        const line = o.json
          ? JSON.stringify(event)
          : `${event.type.padEnd(8)} ${event.path}${event.is_dir ? "/" : ""}${
            event.from !== undefined ? ` (from ${event.from})` : ""
          }`
        process.stdout.write(`${line}\n`)
      }
    })
  })
).pipe(Command.withDescription("Print the changes under a folder as they happen, until the sandbox stops or Ctrl-C"))

const files = Command.make("files").pipe(
  Command.withDescription("A sandbox's files: read, write, ls, stat, mkdir, mv, rm, push, pull, watch"),
  Command.withSubcommands([
    filesRead,
    filesWrite,
    filesList,
    filesStat,
    filesMkdir,
    filesMove,
    filesRemove,
    filesPush,
    filesPull,
    filesWatch
  ])
)

const stats = Command.make(
  "stats",
  { sandboxId, json },
  ({ sandboxId }) => Effect.flatMap(call(async (svc) => (await svc.sandboxes.get(sandboxId)).stats()), print)
).pipe(Command.withDescription("A running sandbox's usage: CPU, memory, processes, network bytes in and out"))

const expose = Command.make(
  "expose",
  {
    sandboxId,
    port: Argument.Int("port").pipe(Argument.withDescription("One of the sandbox's exposed ports")),
    ttlS: Flag.Int("ttl-s").pipe(
      Flag.withDescription("Seconds the token lets requests in (default 3600)"),
      Flag.optional
    ),
    json
  },
  Effect.fn(function*(o) {
    const minted = yield* call(async (svc) =>
      (await svc.sandboxes.get(o.sandboxId)).exposePort(o.port, optionalField("ttl_s", o.ttlS))
    )
    if (o.json) return yield* print(minted)
    yield* Console.log(`${minted.url}\nx-svc-preview-token: ${minted.token}\nexpires ${minted.expiresAt}`)
  })
).pipe(Command.withDescription("A preview URL and token for one exposed port of a sandbox"))

const network = Command.make(
  "network",
  { sandboxId, allow: allowFlag, deny: denyFlag, json },
  Effect.fn(function*(o) {
    const { record } = yield* call(async (svc) =>
      (await svc.sandboxes.get(o.sandboxId)).setNetwork({ allow_out: o.allow, deny_out: o.deny })
    )
    if (o.json) return yield* print(record)
    const rules = (list: ReadonlyArray<string>) => (list.length === 0 ? "-" : list.join(","))
    yield* Console.log(
      `${record.id}  allow_out=${rules(record.network.allow_out)}  deny_out=${rules(record.network.deny_out)}`
    )
  })
).pipe(Command.withDescription("Replace a sandbox's egress policy (no flags: every public address allowed)"))

const bind = Command.make(
  "bind",
  {
    sandboxId,
    secretId: Argument.String("secret-id").pipe(Argument.withDescription("The secret's id (sec_...)")),
    json
  },
  Effect.fn(function*(o) {
    yield* call(async (svc) => (await svc.sandboxes.get(o.sandboxId)).bindSecret(o.secretId))
    if (o.json) return yield* print({ sandbox_id: o.sandboxId, secret_id: o.secretId, bound: true })
    yield* Console.log(`${o.secretId} bound to ${o.sandboxId}`)
  })
).pipe(Command.withDescription("Bind a secret to a sandbox (needs secrets:use)"))

const snapshot = Command.make(
  "snapshot",
  {
    sandboxId,
    name: Flag.String("name").pipe(Flag.withDescription("The new template's name")),
    wait: Flag.Boolean("wait").pipe(
      Flag.withDescription("Print the build's log until it ends; exit 1 if it failed"),
      Flag.withDefault(false)
    ),
    json
  },
  Effect.fn(function*(o) {
    const made = yield* call(async (svc) => (await svc.sandboxes.get(o.sandboxId)).snapshot(o.name, { wait: false }))
    if (o.wait) return yield* followBuild(made.id, o)
    if (o.json) return yield* print(made)
    yield* Console.log(`${made.id}  ${made.name}  ${made.state}`)
  })
).pipe(
  Command.withDescription("Capture a running sandbox's files as a template (svc sandbox create --template <name>)")
)

const fork = Command.make(
  "fork",
  {
    sandboxId,
    count: Flag.Int("count").pipe(Flag.withDescription("How many forks (1 to 20)"), Flag.withDefault(1)),
    name: Flag.String("name").pipe(
      Flag.withDescription("The forks' name (name-1, name-2... for several)"),
      Flag.optional
    ),
    wait: Flag.Boolean("wait").pipe(Flag.withDescription("Wait until every fork runs"), Flag.withDefault(false)),
    json
  },
  Effect.fn(function*(o) {
    const forks = yield* call(async (svc) =>
      (await svc.sandboxes.get(o.sandboxId)).fork(
        { count: o.count, ...optionalField("name", o.name) },
        { wait: o.wait }
      )
    )
    if (o.json) return yield* print(forks.map((f) => f.record))
    for (const f of forks) yield* Console.log(`${f.record.id}  ${f.record.name}  ${f.record.state}`)
  })
).pipe(
  Command.withDescription("Fork a running sandbox: new sandboxes whose files start as its own now (it keeps running)")
)

const secrets = Command.make("secrets").pipe(
  Command.withDescription("The secrets bound to a sandbox"),
  Command.withSubcommands([bind])
)

export const sandbox = Command.make("sandbox").pipe(
  Command.withDescription("Create and use sandboxes through the API (SVC_API_KEY, SVC_API_URL)"),
  Command.withSubcommands([
    create,
    list,
    get,
    exec,
    stop,
    start,
    remove,
    files,
    stats,
    expose,
    network,
    secrets,
    snapshot,
    fork,
    ...processCommands,
    ...contextCommands,
    metrics,
    timeout
  ])
)
