/**
 * The Python SDK (sdks/python, `import svc`) against one real stack: the API over HTTP, the
 * runtime, a real agent with real sandboxes, and the webhook dispatcher delivering to loopback
 * (@svc/api/testing/SandboxesEnv's platform plus the dispatcher). The key is a user's, minted the way
 * a user gets one (sign-up, then a key made with the session), so secrets can be managed.
 *
 * 1. `python3 -m unittest discover sdks/python/tests` with SVC_API_URL and SVC_API_KEY: every
 *    method of Svc and AsyncSvc once, each error path (sdks/python/tests/*.py).
 * 2. `mypy --strict` over the SDK and its tests (Debian's mypy, installed by infra/bootstrap.sh).
 * 3. `pip install sdks/python` into a fresh virtual environment in the system's temporary
 *    folder, offline (`--no-index`), and the README's quick starts run there with that
 *    environment's python; `pip wheel` builds the wheel the same way.
 *
 * About a minute on 2 cores, most of it the stack's start and the virtual environment's pip.
 */
import { expect, layer } from "@effect/vitest"
import { Env, EnvLayer } from "@svc/api/testing/SandboxesEnv"
import { Effect, Layer } from "effect"
import { execFile } from "node:child_process"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { WebhookSender } from "../packages/webhooks/src/Delivery/Attempt.ts"
import { WebhookDispatcher } from "../packages/webhooks/src/Delivery/WebhookDispatcher.ts"
import { WebhookAddressGuard } from "../packages/webhooks/src/Subscriptions/AddressGuard.ts"

// The webhook test's receiver listens on loopback; the platform refuses such targets otherwise.
process.env["SVC_WEBHOOK_ALLOWED_SUBNETS"] = "127.0.0.0/8"

const ROOT = Path.resolve(import.meta.dirname, "..")
const SDK = Path.join(ROOT, "sdks/python")
const PYTHON = process.env["SVC_PYTHON"] ?? "python3"

interface Ran {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

const run = (file: string, args: ReadonlyArray<string>, options: { cwd: string; env: NodeJS.ProcessEnv }) =>
  Effect.promise(() =>
    new Promise<Ran>((resolve) => {
      execFile(file, args, { ...options, timeout: 600_000, maxBuffer: 64 * 1024 * 1024 }, (error, stdout, stderr) =>
        resolve({ code: error === null ? 0 : typeof error.code === "number" ? error.code : 1, stdout, stderr }))
    })
  )

/** Fails the test with the program's whole output when it did not exit 0. */
const expectSuccess = (what: string, ran: Ran) =>
  expect(ran.code, `${what} exited ${ran.code}\n--- stdout\n${ran.stdout}\n--- stderr\n${ran.stderr}`).toBe(0)

/** A user's key: sign up, then mint a key with the session (as the dashboard does). */
const userKey = (base: string) =>
  Effect.promise(async () => {
    const up = await fetch(`${base}/v1/auth/sign-up`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ email: "python@example.com", password: "a long enough password", org_name: "Python" })
    })
    expect(up.status, await up.clone().text()).toBe(201)
    const cookie = up.headers.get("set-cookie")!.split(";")[0]!
    const minted = await fetch(`${base}/v1/auth/api-keys`, {
      method: "POST",
      headers: { "content-type": "application/json", cookie, origin: base },
      body: JSON.stringify({ name: "python" })
    })
    expect(minted.status).toBe(201)
    return ((await minted.json()) as { token: string }).token
  })

/** The environment of a Python program: the stack, and nothing of the repository's own Python set-up. */
const pythonEnv = (base: string, key: string, extra: Record<string, string> = {}): NodeJS.ProcessEnv => ({
  PATH: process.env["PATH"] ?? "/usr/bin:/bin",
  HOME: process.env["HOME"] ?? "/root",
  PYTHONDONTWRITEBYTECODE: "1",
  SVC_API_URL: base,
  SVC_API_KEY: key,
  ...extra
})

const Stack = Layer.provideMerge(
  WebhookDispatcher.layer.pipe(Layer.provide(WebhookSender.layer), Layer.provide(WebhookAddressGuard.layer)),
  EnvLayer
)

/** The ```python blocks of the SDK's README. */
const readmeBlocks = () =>
  [...Fs.readFileSync(Path.join(SDK, "README.md"), "utf8").matchAll(/```python\n([\s\S]*?)```/g)].map((m) => m[1]!)

layer(Stack, { excludeTestServices: true, timeout: 400_000 })("the Python SDK", (it) => {
  it.effect(
    "mypy --strict finds nothing in the SDK and its tests (pyproject.toml's [tool.mypy])",
    () =>
      Effect.gen(function*() {
        const ran = yield* run("mypy", [], { cwd: SDK, env: { PATH: process.env["PATH"] ?? "/usr/bin:/bin" } })
        expectSuccess("mypy", ran)
        expect(ran.stdout).toMatch(/^Success: no issues found in \d+ source files/m)
      }),
    300_000
  )

  let key: string | undefined
  const keyOf = (base: string) =>
    key !== undefined ? Effect.succeed(key) : Effect.tap(userKey(base), (minted) => Effect.sync(() => (key = minted)))

  it.effect("python3 -m unittest discover sdks/python/tests passes against the stack", () =>
    Effect.gen(function*() {
      const env = yield* Env
      const token = yield* keyOf(env.base)
      const ran = yield* run(PYTHON, ["-m", "unittest", "discover", "-v", "-s", "sdks/python/tests"], {
        cwd: ROOT,
        env: pythonEnv(env.base, token, { PYTHONPATH: Path.join(SDK, "src") })
      })
      expectSuccess("the Python SDK's tests", ran)
      // unittest reports on stderr: every test ran, none skipped (a skip means no stack was seen).
      const count = Number(/Ran (\d+) tests?/.exec(ran.stderr)?.[1] ?? 0)
      expect(count, ran.stderr).toBeGreaterThanOrEqual(38)
      expect(ran.stderr).not.toMatch(/skipped/)
      expect(ran.stderr).toMatch(/\nOK\n/)
    }), 600_000)

  it.effect(
    "pip install sdks/python into a fresh venv outside the repository, offline; the README's quick starts run",
    () =>
      Effect.gen(function*() {
        const env = yield* Env
        const token = yield* keyOf(env.base)
        const dir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "svc-python-user-"))
        try {
          const plain = pythonEnv(env.base, token)
          expectSuccess(
            "python3 -m venv",
            yield* run(PYTHON, ["-m", "venv", Path.join(dir, "venv")], { cwd: dir, env: plain })
          )
          const pip = Path.join(dir, "venv/bin/pip")
          const python = Path.join(dir, "venv/bin/python")
          // --no-index: nothing from a registry, the build backend included (it is the standard library's).
          expectSuccess(
            "pip install",
            yield* run(pip, ["install", "--no-index", "--no-cache-dir", "--disable-pip-version-check", SDK], {
              cwd: dir,
              env: plain
            })
          )
          const wheels = Path.join(dir, "wheels")
          expectSuccess(
            "pip wheel",
            yield* run(pip, ["wheel", "--no-index", "--no-deps", "--disable-pip-version-check", "-w", wheels, SDK], {
              cwd: dir,
              env: plain
            })
          )
          expect(Fs.readdirSync(wheels)).toEqual(["svc_sdk-0.1.0-py3-none-any.whl"])

          // The installed package, not the repository's sources: typed, and no third-party module imported.
          const where = yield* run(python, [
            "-c",
            "import sys; before = set(sys.modules); import svc, svc.aio, os; print(svc.__file__); "
            + "print(os.path.exists(os.path.join(os.path.dirname(svc.__file__), 'py.typed'))); "
            + "print(sorted({m.split('.')[0] for m in set(sys.modules) - before} - set(sys.stdlib_module_names) - {'svc'}))"
          ], { cwd: dir, env: plain })
          expectSuccess("import svc", where)
          const [file, typed, foreign] = where.stdout.trim().split("\n")
          expect(file!.startsWith(Path.join(dir, "venv"))).toBe(true)
          expect(typed).toBe("True")
          expect(foreign).toBe("[]")

          const [quickStart, asyncQuickStart] = readmeBlocks()
          Fs.writeFileSync(Path.join(dir, "quick_start.py"), quickStart!)
          Fs.writeFileSync(Path.join(dir, "async_quick_start.py"), asyncQuickStart!)
          const sync = yield* run(python, ["quick_start.py"], { cwd: dir, env: plain })
          expectSuccess("the quick start", sync)
          expect(sync.stdout).toBe("hello from Linux\nhi from a file\n")
          const asynchronous = yield* run(python, ["async_quick_start.py"], { cwd: dir, env: plain })
          expectSuccess("the asyncio quick start", asynchronous)
          expect(asynchronous.stdout).toBe("0\n1\n2\n")
        } finally {
          Fs.rmSync(dir, { recursive: true, force: true })
        }
      }),
    300_000
  )
})
