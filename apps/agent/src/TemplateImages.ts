/**
 * Templates' images on this host, the agent's side (`@svc/host-protocol/Images`): layers pulled
 * from the `images` object store the first time a sandbox needs them (verified by digest by the
 * driver's import), layers made here pushed to it, and template builds (`build` commands): each
 * step runs in a build sandbox of the image so far, with the network, and its writable layer
 * becomes the step's layer unless the layer cache has it already.
 *
 * A build's progress and end go to the `builds` KV entry of its template (the log flushed about
 * every half second, its last 256 KiB); the control plane applies the end. A build past its
 * `timeoutMs` is cut here too (its sandbox destroyed) and ends `failed`.
 *
 * The store decides which layers live (the control plane removes those no template refers to):
 * a layer removed from it is removed here too, as the store's watch reports it, and at start
 * every extracted layer the store no longer has goes. No live sandbox stacks such a layer (a
 * template is not deleted while a sandbox uses it).
 */
import { type BusError, Nats } from "@svc/bus/Nats"
import { beginContentPut, ensureObjectStore, type ObjectStore } from "@svc/bus/Objects"
import { ensureBucket } from "@svc/bus/Topology"
import { OPEN_POLICY } from "@svc/domain/Network"
import { EGRESS_BUCKET_SPEC, type SandboxEgress, sandboxEgressKey } from "@svc/host-protocol/Egress"
import {
  type BuildCommand,
  BUILDS_BUCKET_SPEC,
  type BuildStatus,
  BuildStatus as BuildStatusSchema,
  IMAGES_OBJECT_STORE,
  LAYER_CACHE_BUCKET_SPEC
} from "@svc/host-protocol/Images"
import { DriverExecRequest, MAX_LAYERS, SandboxDriver, type SandboxDriverError, SandboxSpec } from "@svc/host/Driver"
import { HELPER as HELPER_BUSYBOX } from "@svc/host/Driver/Host"
import { digestFile, LAYER_HEX } from "@svc/host/ImageLayers"
import { shellQuote } from "@svc/host/Oci/ImageConfig"
import { Context, Duration, Effect, Fiber, Layer, Schedule, Schema, Semaphore, Stream } from "effect"
import { createHash, randomBytes } from "node:crypto"
import * as FsSync from "node:fs"
import * as Fs from "node:fs/promises"
import * as NodePath from "node:path"
import { Readable } from "node:stream"
import { pipeline } from "node:stream/promises"
import * as BuildContext from "./BuildContext.ts"
import { AgentConfig } from "./Config.ts"
import * as ImagePulls from "./ImagePulls.ts"
import { describeDriverError } from "./LocalSandboxes/DriverErrors.ts"

const MAX_LOG = 256 * 1024
const STORE_CHUNK_BYTES = ImagePulls.LAYER_STORE_CHUNK_BYTES
const encodeStatus = Schema.encodeSync(Schema.fromJsonString(BuildStatusSchema))
const encoder = new TextEncoder()

export class ImageError extends Schema.TaggedError<ImageError>()("ImageError", { message: Schema.String }) {}

/** A build step failed: its words are the template's `errorMessage`. */
class StepFailed extends Schema.TaggedError<StepFailed>()("StepFailed", { message: Schema.String }) {}

export class TemplateImages extends Context.Service<TemplateImages, {
  /** Each layer extracted on this host, pulled from the store when absent. */
  ensureLayers(layers: ReadonlyArray<string>): Effect.Effect<void, ImageError>
  /** Runs a build command to its end (never fails: the end is in the `builds` entry). */
  build(command: BuildCommand): Effect.Effect<void>
}>()("@svc/agent/TemplateImages") {
  static readonly layer = Layer.effect(
    TemplateImages,
    Effect.gen(function*() {
      const config = yield* AgentConfig
      const driver = yield* SandboxDriver
      const nats = yield* Nats
      const scratch = NodePath.join(config.dataDir, "agent", "images")
      yield* Effect.promise(() => Fs.mkdir(scratch, { recursive: true, mode: 0o700 }))
      // Opened on first use: an agent whose store is unreachable still runs `base` sandboxes.
      let store: ObjectStore | undefined
      const openStore = Effect.suspend(() =>
        store !== undefined ? Effect.succeed(store) : ensureObjectStore(IMAGES_OBJECT_STORE).pipe(
          Effect.tap((opened) => Effect.sync(() => (store = opened))),
          Effect.provideService(Nats, nats)
        )
      )
      const builds = yield* ensureBucket(BUILDS_BUCKET_SPEC).pipe(Effect.provideService(Nats, nats))
      const layerCache = yield* ensureBucket(LAYER_CACHE_BUCKET_SPEC).pipe(Effect.provideService(Nats, nats))
      // A build sandbox's egress entry: the proxy refuses a sandbox it has no entry for, and
      // builds reach the network as the operator's default allows (apt, pip), with no secret.
      const egress = yield* ensureBucket(EGRESS_BUCKET_SPEC).pipe(Effect.provideService(Nats, nats))
      const putBuildEgress = (id: string, orgId: string) =>
        Effect.tryPromise(() =>
          egress.put(
            sandboxEgressKey(id),
            encoder.encode(
              JSON.stringify({ sandboxId: id, orgId, policy: OPEN_POLICY, secretIds: [] } satisfies SandboxEgress)
            )
          )
        ).pipe(Effect.mapError((e) => fail(`the build sandbox's egress entry: ${String(e)}`)))
      const deleteBuildEgress = (id: string) =>
        Effect.ignore(Effect.tryPromise(() => egress.delete(sandboxEgressKey(id))))
      // One pull of a layer at a time per host: two creates of one image share it.
      const pulling = yield* Semaphore.make(1)

      const fail = (message: string) => new ImageError({ message })
      const busError = (e: BusError) => fail(e.message)

      const pull = (hex: string) =>
        Effect.gen(function*() {
          if (yield* driver.hasLayer(hex).pipe(Effect.mapError((e) => fail(describeDriverError(e))))) return
          const objects = yield* openStore.pipe(Effect.mapError(busError))
          const file = NodePath.join(scratch, `pull-${hex}-${randomBytes(4).toString("hex")}.tar`)
          yield* Effect.tryPromise({
            try: async () => {
              const result = await objects.get(hex)
              if (result === null) throw new Error(`layer ${hex.slice(0, 12)} is not in the image store`)
              await pipeline(Readable.fromWeb(result.data as never), FsSync.createWriteStream(file, { mode: 0o600 }))
              if (!(await result.error.then(() => true))) throw new Error("the layer's download failed")
            },
            catch: (e) => fail(e instanceof Error ? e.message : String(e))
          })
          // The driver checks the bytes against the digest before extracting them.
          yield* driver.importLayer(hex, file).pipe(
            Effect.mapError((e) => fail(describeDriverError(e))),
            Effect.ensuring(Effect.promise(() => Fs.rm(file, { force: true })))
          )
        })

      const ensureLayers = (layers: ReadonlyArray<string>) =>
        Effect.forEach(layers, (hex) => pulling.withPermit(pull(hex)), { discard: true })

      /**
       * Pushes a layer tar to the store (a layer there already is left alone) and extracts it
       * here. Sent as image pulls send theirs (`beginContentPut`: a few chunks in flight, named
       * at the commit), not by the library's `put`, which waits for each chunk's ack.
       */
      const publish = (file: string) =>
        Effect.gen(function*() {
          const hex = yield* Effect.promise(() => digestFile(file))
          const objects = yield* openStore.pipe(Effect.mapError(busError))
          yield* Effect.tryPromise({
            try: async (signal) => {
              if ((await objects.info(hex)) !== null) return
              const upload = beginContentPut(objects, STORE_CHUNK_BYTES)
              try {
                for await (const chunk of FsSync.createReadStream(file, { highWaterMark: STORE_CHUNK_BYTES, signal })) {
                  await upload.write(chunk as Buffer)
                }
                // Named by the bytes sent; the import below takes `hex` as the file's digest.
                const sent = await upload.commit()
                if (sent !== hex) throw new Error(`the layer changed while it was sent (sha256:${sent})`)
              } catch (e) {
                await upload.abort()
                throw e
              }
            },
            catch: (e) => fail(`pushing the layer: ${e instanceof Error ? e.message : String(e)}`)
          })
          // Hashed just above from the file this agent wrote: not hashed again.
          yield* driver.importLayer(hex, file, { digestChecked: true }).pipe(
            Effect.mapError((e) => fail(describeDriverError(e)))
          )
          return hex
        })

      const pulls = yield* Effect.orDie(ImagePulls.make({
        dataDir: config.dataDir,
        layerCache,
        openStore,
        ensureLayers,
        beginImport: driver.beginLayerImport.pipe(Effect.mapError((e) => fail(describeDriverError(e))))
      }))

      const build = (command: BuildCommand) =>
        Effect.gen(function*() {
          const started = Date.now()
          let log = ""
          let dirty = true
          const status: { -readonly [K in keyof BuildStatus]: BuildStatus[K] } = {
            templateId: command.sandboxId,
            hostId: config.hostId,
            state: "building",
            layers: [...command.layers],
            env: { ...command.env },
            errorMessage: null,
            log: "",
            stepsRun: 0,
            stepsCached: 0,
            updatedAt: started
          }
          const write = (line: string) => {
            log += line.endsWith("\n") ? line : line + "\n"
            if (log.length > MAX_LOG) log = log.slice(log.length - MAX_LOG)
            dirty = true
          }
          const flush = Effect.suspend(() => {
            if (!dirty) return Effect.void
            dirty = false
            status.log = log
            status.updatedAt = Date.now()
            const text = encodeStatus(status)
            return Effect.tryPromise(() => builds.put(command.sandboxId, encoder.encode(text))).pipe(
              Effect.asVoid,
              Effect.catch((e) => Effect.logWarning("agent: build status not written", { error: String(e) }))
            )
          })
          const flusher = yield* Effect.forkChild(
            Effect.forever(Effect.andThen(Effect.sleep(Duration.millis(500)), flush))
          )
          const driverFailure = (what: string) => (e: SandboxDriverError) => {
            write(`${what}: ${describeDriverError(e)}`)
            return new StepFailed({ message: `${what} failed on the host` })
          }
          const buildSandboxes: Array<string> = []
          const cleanups: Array<() => Promise<unknown>> = []

          const steps = Effect.gen(function*() {
            write(`build of ${command.sandboxId} on ${config.hostId}`)
            const root = yield* driver.prepareRoot(command.root, write).pipe(
              Effect.mapError(driverFailure(`preparing the ${command.root} root`))
            )
            yield* ensureLayers(command.layers).pipe(Effect.mapError((e) => new StepFailed({ message: e.message })))
            const layers = [...command.layers]
            // Grows with `env` steps; each step's sandbox takes it as it is then.
            const env: Record<string, string> = { ...command.env }
            // How the image runs so far: the base template's, then the pulled image's, then the
            // Dockerfile's settings as its steps come.
            const run = {
              digest: null as string | null,
              workdir: command.runAs?.workdir ?? null,
              user: command.runAs?.user ?? null,
              entrypoint: null as ReadonlyArray<string> | null,
              cmd: null as ReadonlyArray<string> | null,
              startCmd: null as string | null,
              exposedPorts: [] as Array<number>,
              configured: command.image !== undefined
            }
            if (command.image !== undefined) {
              const pulled = yield* pulls.pull(command.image, write).pipe(
                Effect.mapError((e) => new StepFailed({ message: e.message }))
              )
              layers.push(...pulled.layers)
              Object.assign(env, pulled.env)
              run.digest = pulled.image.digest
              run.workdir = pulled.image.workdir
              run.user = pulled.image.user
              run.entrypoint = pulled.entrypoint
              run.cmd = pulled.cmd
              run.startCmd = pulled.image.startCmd
              run.exposedPorts.push(...pulled.image.exposedPorts)
            }
            // The context, fetched and extracted at the first COPY.
            let contextDir: string | undefined
            const contextOf = Effect.gen(function*() {
              if (contextDir !== undefined) return contextDir
              const hex = command.contextObject
              if (hex === undefined) return yield* new StepFailed({ message: "COPY without a context" })
              const objects = yield* openStore.pipe(Effect.mapError((e) => new StepFailed({ message: e.message })))
              const file = NodePath.join(scratch, `context-${command.sandboxId}.tar.gz`)
              const dir = NodePath.join(scratch, `context-${command.sandboxId}`)
              yield* Effect.tryPromise({
                try: async () => {
                  const result = await objects.get(hex)
                  if (result === null) throw new Error("the build's context is not in the image store")
                  await pipeline(
                    Readable.fromWeb(result.data as never),
                    FsSync.createWriteStream(file, { mode: 0o600 })
                  )
                  if (!(await result.error.then(() => true))) throw new Error("the context's download failed")
                  if ((await digestFile(file)) !== hex) throw new Error("the context does not match its digest")
                  await BuildContext.extractContext(file, dir)
                },
                catch: (e) =>
                  new StepFailed({ message: `the build's context: ${e instanceof Error ? e.message : String(e)}` })
              }).pipe(Effect.ensuring(Effect.promise(() => Fs.rm(file, { force: true }))))
              contextDir = dir
              return dir
            })
            cleanups.push(() =>
              Fs.rm(NodePath.join(scratch, `context-${command.sandboxId}`), { recursive: true, force: true })
            )

            /** A sandbox of the image so far, for one step (or a snapshot's export). */
            const withBuildSandbox = <A, E>(use: (id: string) => Effect.Effect<A, E>) =>
              Effect.gen(function*() {
                const id = `build-${randomBytes(8).toString("hex")}`
                buildSandboxes.push(id)
                yield* putBuildEgress(id, command.orgId).pipe(
                  Effect.mapError((e) => new StepFailed({ message: e.message }))
                )
                yield* driver.create(
                  new SandboxSpec({
                    sandboxId: id,
                    template: root,
                    env: { ...env },
                    cpu: 2,
                    ramMb: 2048,
                    diskGb: 8,
                    exposedPorts: [],
                    layers
                  })
                ).pipe(Effect.mapError(driverFailure("starting the build sandbox")))
                return yield* use(id)
              })

            const commit = (id: string) =>
              Effect.gen(function*() {
                const file = NodePath.join(scratch, `layer-${id}.tar`)
                yield* driver.exportLayer(id, file).pipe(Effect.mapError(driverFailure("saving the step's layer")))
                return yield* publish(file).pipe(
                  Effect.mapError((e) => new StepFailed({ message: e.message })),
                  Effect.ensuring(Effect.promise(() => Fs.rm(file, { force: true })))
                )
              })

            if (command.snapshotOf !== undefined) {
              write(`snapshot of ${command.snapshotOf}`)
              const file = NodePath.join(scratch, `snapshot-${command.sandboxId}.tar`)
              yield* driver.exportLayer(command.snapshotOf, file).pipe(
                Effect.mapError(driverFailure("reading the sandbox's file system"))
              )
              const hex = yield* publish(file).pipe(
                Effect.mapError((e) => new StepFailed({ message: e.message })),
                Effect.ensuring(Effect.promise(() => Fs.rm(file, { force: true })))
              )
              layers.push(hex)
              write(`layer sha256:${hex}`)
            }

            /** Runs `argv` as root in a build sandbox; fails the step unless it exits 0. */
            const asRoot = (id: string, label: string, argv: ReadonlyArray<string>) =>
              driver.exec(id, new DriverExecRequest({ cmd: argv, env, cwd: "/", user: "0:0", timeoutMs: 60_000 })).pipe(
                Effect.mapError(driverFailure(label)),
                Effect.flatMap((result) =>
                  result.exitCode === 0
                    ? Effect.succeed(Buffer.from(result.stdout).toString("utf8"))
                    : Effect.fail(
                      new StepFailed({
                        message: `${label} failed: ${Buffer.from(result.stderr).toString("utf8").trim().slice(0, 300)}`
                      })
                    )
                )
              )

            for (const [index, step] of command.steps.entries()) {
              const label = `step ${index + 1}/${command.steps.length}`
              if ("env" in step) {
                for (const [name, value] of Object.entries(step.env)) env[name] = value
                write(`${label} env ${Object.keys(step.env).join(" ")}`)
                continue
              }
              if ("cmd" in step || "entrypoint" in step || "expose" in step || "shell" in step) {
                run.configured = true
                if ("cmd" in step) run.cmd = step.cmd
                if ("entrypoint" in step) {
                  // Docker: a new ENTRYPOINT drops the base's CMD (a CMD after it sets one again).
                  run.entrypoint = step.entrypoint
                  run.cmd = null
                }
                if ("expose" in step) run.exposedPorts.push(...step.expose)
                const argv = [...(run.entrypoint ?? []), ...(run.cmd ?? [])]
                run.startCmd = argv.length > 0 ? argv.map(shellQuote).join(" ") : null
                write(`${label} ${Object.keys(step)[0]} ${JSON.stringify(Object.values(step)[0])}`)
                continue
              }
              if ("user" in step) {
                run.configured = true
                const [name = "", group] = step.user.split(":")
                if (/^\d+$/.test(name) && (group === undefined || /^\d+$/.test(group))) {
                  run.user = `${name}:${group ?? name}`
                } else {
                  // A name: looked up in the image so far, by the helper's `id` inside a sandbox of it.
                  const ids = yield* withBuildSandbox((id) =>
                    asRoot(id, `${label} (USER ${step.user})`, [
                      HELPER_BUSYBOX,
                      "sh",
                      "-c",
                      `B=${HELPER_BUSYBOX}; u=$($B id -u "$1") || exit 1; ` +
                      `if [ -n "$2" ]; then case "$2" in *[!0-9]*) g=$($B awk -F: -v n="$2" '$1==n{print $3}' /etc/group);; *) g=$2;; esac; else g=$($B id -g "$1"); fi; ` +
                      `[ -n "$g" ] || { echo "no group $2" >&2; exit 1; }; echo "$u:$g"`,
                      "user",
                      name,
                      group ?? ""
                    ])
                  )
                  run.user = ids.trim()
                }
                if (!/^\d{1,5}:\d{1,5}$/.test(run.user) || run.user.split(":").some((n) => Number(n) > 65535)) {
                  return yield* new StepFailed({ message: `${label}: USER ${step.user} is outside 0..65535` })
                }
                if (run.user === "0:0") run.user = null
                write(`${label} user ${step.user} (${run.user ?? "0:0"})`)
                continue
              }
              if ("workdir" in step) {
                run.configured = true
                run.workdir = step.workdir
              }
              const key = createHash("sha256").update(
                // A COPY's layer is its context's too.
                JSON.stringify([
                  command.root,
                  layers,
                  env,
                  step,
                  run.workdir,
                  run.user,
                  "copy" in step ? command.contextObject : null
                ])
              ).digest("hex")
              const cached = yield* Effect.tryPromise(() => layerCache.get(key)).pipe(Effect.orElseSucceed(() => null))
              const cachedHex = cached?.operation === "PUT" ? cached.string() : ""
              // Taken only while the store has it: a layer collected meanwhile is made again.
              const stored = LAYER_HEX.test(cachedHex) &&
                (yield* openStore.pipe(
                  Effect.flatMap((objects) => Effect.tryPromise(() => objects.info(cachedHex))),
                  Effect.map((info) => info !== null),
                  Effect.orElseSucceed(() => false)
                ))
              if (stored) {
                const pulled = yield* Effect.result(ensureLayers([cachedHex]))
                if (pulled._tag === "Success") {
                  layers.push(cachedHex)
                  status.stepsCached++
                  write(`${label} cached: sha256:${cachedHex}`)
                  continue
                }
              }
              write(
                "run" in step
                  ? `${label} run: ${step.run}`
                  : "file" in step
                  ? `${label} file: ${step.file.path}`
                  : "copy" in step
                  ? `${label} copy: ${step.copy.sources.join(" ")} ${step.copy.dest}`
                  : `${label} workdir: ${step.workdir}`
              )
              const hex = yield* withBuildSandbox((id) =>
                Effect.gen(function*() {
                  if ("run" in step) {
                    const remaining = Math.max(1000, command.timeoutMs - (Date.now() - started))
                    const result = yield* driver.exec(
                      id,
                      new DriverExecRequest({
                        cmd: step.argv ?? ["/bin/sh", "-c", step.run],
                        env: { ...env, ...step.args },
                        cwd: run.workdir ?? "/",
                        ...(run.user !== null ? { user: run.user } : {}),
                        timeoutMs: remaining,
                        maxOutputBytes: MAX_LOG
                      })
                    ).pipe(Effect.mapError(driverFailure(`${label}`)))
                    const out = Buffer.from(result.stdout).toString("utf8")
                    const err = Buffer.from(result.stderr).toString("utf8")
                    if (out.length > 0) write(out)
                    if (err.length > 0) write(err)
                    if (result.exitCode !== 0) {
                      return yield* new StepFailed({
                        message: result.timedOut
                          ? `${label} (run) ran past the build's time limit`
                          : `${label} (run) exited with code ${result.exitCode}`
                      })
                    }
                  } else if ("file" in step) {
                    yield* driver.writeFile(
                      id,
                      step.file.path,
                      encoder.encode(step.file.content),
                      step.file.mode ?? 0o644
                    ).pipe(Effect.mapError(driverFailure(`${label} (file ${step.file.path})`)))
                  } else if ("workdir" in step) {
                    yield* asRoot(id, `${label} (WORKDIR ${step.workdir})`, [
                      HELPER_BUSYBOX,
                      "mkdir",
                      "-p",
                      "--",
                      step.workdir
                    ])
                  } else {
                    // COPY: a tar of what it copies, unpacked at / inside, then removed.
                    const context = yield* contextOf
                    const stage = NodePath.join(scratch, `stage-${id}`)
                    const file = NodePath.join(scratch, `copy-${id}.tar`)
                    const packed = yield* Effect.tryPromise({
                      try: () => BuildContext.packCopy(context, step.copy, stage, file),
                      catch: (e) =>
                        new StepFailed({ message: `${label} (COPY): ${e instanceof Error ? e.message : String(e)}` })
                    }).pipe(Effect.ensuring(Effect.promise(() => Fs.rm(stage, { recursive: true, force: true }))))
                    const bytes = yield* Effect.promise(() => Fs.readFile(file)).pipe(
                      Effect.ensuring(Effect.promise(() => Fs.rm(file, { force: true })))
                    )
                    const inside = `/tmp/.svc-copy-${id}.tar`
                    yield* driver.writeFile(id, inside, bytes, 0o600).pipe(
                      Effect.mapError(driverFailure(`${label} (COPY)`))
                    )
                    yield* asRoot(id, `${label} (COPY)`, [
                      HELPER_BUSYBOX,
                      "sh",
                      "-c",
                      `B=${HELPER_BUSYBOX}; f=$1; shift; $B mkdir -p -- "$@" && $B tar -xf "$f" -C / && $B rm -f -- "$f"`,
                      "copy",
                      inside,
                      ...packed.parents
                    ])
                  }
                  return yield* commit(id)
                })
              )
              yield* Effect.tryPromise(() => layerCache.put(key, encoder.encode(hex))).pipe(Effect.ignore)
              layers.push(hex)
              status.stepsRun++
              write(`${label} done: sha256:${hex}`)
            }
            if (layers.length > MAX_LAYERS) {
              return yield* new StepFailed({
                message: `the image has ${layers.length} layers; a sandbox stacks at most ${MAX_LAYERS}`
              })
            }
            if (run.configured) {
              status.image = {
                digest: run.digest,
                workdir: run.workdir,
                user: run.user,
                startCmd: run.startCmd,
                exposedPorts: [...new Set(run.exposedPorts)].slice(0, 64)
              }
            }
            status.layers = layers
            status.env = env
          })

          const ended = yield* steps.pipe(
            Effect.timeoutOrElse({
              duration: Duration.millis(command.timeoutMs),
              orElse: () =>
                Effect.fail(
                  new StepFailed({
                    message: `the build ran past its time limit (${Math.round(command.timeoutMs / 1000)} s)`
                  })
                )
            }),
            Effect.result
          )
          yield* Effect.forEach(
            buildSandboxes,
            (id) => Effect.andThen(Effect.ignore(driver.destroy(id)), deleteBuildEgress(id)),
            { discard: true }
          )
          yield* Effect.forEach(cleanups, (clean) => Effect.promise(() => clean().catch(() => undefined)), {
            discard: true
          })
          if (ended._tag === "Success") {
            status.state = "ready"
            write(`ready in ${((Date.now() - started) / 1000).toFixed(1)} s`)
          } else {
            status.state = "failed"
            status.errorMessage = ended.failure.message
            write(`failed: ${ended.failure.message}`)
          }
          yield* Fiber.interrupt(flusher)
          dirty = true
          // The end must reach the bucket: the control plane waits for it.
          yield* Effect.suspend(() => {
            status.log = log
            status.updatedAt = Date.now()
            return Effect.tryPromise(() => builds.put(command.sandboxId, encoder.encode(encodeStatus(status))))
          }).pipe(
            Effect.retry({ times: 20, schedule: Schedule.spaced(Duration.millis(500)) }),
            Effect.ignore
          )
        }).pipe(Effect.withSpan("TemplateImages.build", { attributes: { templateId: command.sandboxId } }))

      /** Removes an extracted layer the store no longer has (one pull or removal at a time). */
      const drop = (hex: string) =>
        pulling.withPermit(
          driver.removeLayer(hex).pipe(
            Effect.tap(() => Effect.logInfo("agent: image layer removed", { layer: hex.slice(0, 12) })),
            Effect.catch((e) => Effect.logWarning("agent: removing a layer failed", { error: describeDriverError(e) }))
          )
        )
      const collect = Effect.gen(function*() {
        const objects = yield* openStore
        const watcher = yield* Effect.tryPromise(() => objects.watch({ includeHistory: false }))
        yield* Effect.addFinalizer(() => Effect.sync(() => watcher.stop()))
        // What went while this agent was down.
        const local = yield* driver.layers.pipe(Effect.orElseSucceed(() => [] as ReadonlyArray<string>))
        for (const hex of local) {
          const info = yield* Effect.tryPromise(() => objects.info(hex))
          if (info === null) yield* drop(hex)
        }
        yield* Stream.fromAsyncIterable(watcher, (e) => new ImageError({ message: String(e) })).pipe(
          Stream.filter((info) => info.deleted && LAYER_HEX.test(info.name)),
          Stream.runForEach((info) => drop(info.name))
        )
      }).pipe(Effect.scoped)
      yield* Effect.forkScoped(
        collect.pipe(
          Effect.catchCause((cause) => Effect.logWarning("agent: image layer collection stopped", { cause })),
          Effect.andThen(Effect.sleep(Duration.seconds(10))),
          Effect.forever
        )
      )

      return TemplateImages.of({ ensureLayers, build })
    })
  )
}
