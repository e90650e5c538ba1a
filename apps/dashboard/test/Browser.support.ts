/**
 * The dashboard's browser tests' support: Debian's chromium driven by playwright-core with a
 * fresh profile for the scope, screenshots under .svc/artifacts/dashboard/, and the steps a user
 * takes, found the way assistive technology finds them (roles and labels).
 */
import { Effect, Exit } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { chromium, type Page } from "playwright-core"
import { ensureBuilt } from "../scripts/build.ts"

export const ARTIFACTS = Path.resolve(import.meta.dirname, "../../../.svc/artifacts/dashboard")

/** Chromium as root, headless, quiet on a machine without a network (no background fetches). */
const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync"
]

/** Waits are generous: a loaded 2-core machine starts sandboxes and renders slowly. */
export const WAIT_MS = 90_000
export const SANDBOX_WAIT_MS = 180_000

export const promise = <A>(f: () => Promise<A>) => Effect.promise(f)

/**
 * The current build (made if the sources changed) and a browser with a fresh profile for the
 * scope; its page, with the page errors and Content-Security-Policy violations it reports. When
 * the scope ends in a failure, the page as it was is kept as `<name>-failure.png`.
 */
export const openBrowser = (name: string) =>
  Effect.gen(function*() {
    yield* promise(() => ensureBuilt({ quiet: true }))
    Fs.mkdirSync(ARTIFACTS, { recursive: true })
    const { context } = yield* Effect.acquireRelease(
      promise(async () => {
        const userDataDir = Fs.mkdtempSync(Path.join(Os.tmpdir(), "svc-chromium-"))
        const context = await chromium.launchPersistentContext(userDataDir, {
          executablePath: "/usr/bin/chromium",
          headless: true,
          args: CHROMIUM_ARGS,
          viewport: { width: 1280, height: 900 }
        })
        context.setDefaultTimeout(WAIT_MS)
        context.setDefaultNavigationTimeout(WAIT_MS)
        return { context, userDataDir }
      }),
      ({ context, userDataDir }) =>
        promise(async () => {
          await context.close().catch(() => undefined)
          Fs.rmSync(userDataDir, { recursive: true, force: true })
        })
    )
    const page = context.pages()[0] ?? (yield* promise(() => context.newPage()))
    const pageErrors: Array<string> = []
    const policyViolations: Array<string> = []
    /** Requests the browser could not complete (a diagnosis when a step fails; some are expected). */
    const requestFailures: Array<string> = []
    page.on(
      "requestfailed",
      (request) => requestFailures.push(`${request.method()} ${request.url()}: ${request.failure()?.errorText}`)
    )
    page.on("pageerror", (error) => pageErrors.push(error.message))
    page.on("console", (message) => {
      if (message.text().includes("Content Security Policy")) policyViolations.push(message.text())
    })
    yield* Effect.addFinalizer((exit) =>
      Exit.isFailure(exit) ? Effect.ignore(screenshot(page, `${name}-failure`)) : Effect.void
    )
    return { context, page, pageErrors, policyViolations, requestFailures }
  })

export const screenshot = (page: Page, name: string) =>
  promise(() => page.screenshot({ path: Path.join(ARTIFACTS, `${name}.png`), fullPage: true }))

export const heading = (page: Page, name: string) =>
  promise(() => page.getByRole("heading", { level: 1, name, exact: true }).waitFor())

export const navigateTo = (page: Page, section: string) =>
  Effect.andThen(
    promise(() => page.getByRole("navigation", { name: "Sections" }).getByRole("link", { name: section }).click()),
    heading(page, section)
  )

export const fill = (page: Page, label: string, value: string) =>
  promise(() => page.getByLabel(label, { exact: true }).fill(value))

export const click = (page: Page, button: string) =>
  promise(() => page.getByRole("button", { name: button, exact: true }).click())

/** The row of the table that holds `text`. */
export const row = (page: Page, text: string) => page.getByRole("row").filter({ hasText: text })

/** Accepts the next confirm() (deleting, revoking). */
export const acceptNextDialog = (page: Page) => page.once("dialog", (dialog) => void dialog.accept())

/** Inputs without a label and buttons or links without a name on the current page. */
export const unlabelled = (page: Page) =>
  promise(() =>
    page.evaluate(`[
      ...[...document.querySelectorAll("input, select, textarea")]
        .filter((e) => !e.closest(".xterm") && e.labels.length === 0 && !e.getAttribute("aria-label"))
        .map((e) => e.outerHTML),
      ...[...document.querySelectorAll("button, a")]
        .filter((e) => (e.getAttribute("aria-label") ?? e.textContent ?? "").trim() === "")
        .map((e) => e.outerHTML)
    ]`) as Promise<Array<string>>
  )

/** Signs up through the pages (from wherever the app is) and lands on the sandboxes. */
export const signUp = (page: Page, base: string, account: { email: string; password: string; org: string }) =>
  Effect.gen(function*() {
    yield* promise(() => page.goto(`${base}/sign-up`))
    yield* heading(page, "Create an account")
    yield* fill(page, "Email", account.email)
    yield* fill(page, "Password", account.password)
    yield* fill(page, "Organization name", account.org)
    yield* click(page, "Create account")
    yield* heading(page, "Sandboxes")
  })
