/**
 * The dashboard end to end in a real browser: Debian's chromium driven by playwright-core,
 * against the API serving the built dashboard with the runtime and a real agent behind it (the
 * sandbox API tests' platform). What a user does and sees, found the way a screen reader finds
 * it (roles and labels): sign up, a wrong password refused, mint a key (its token shown once,
 * and working), a sandbox created and turning running without a reload, a command run in the
 * exec console (stdout, stderr, exit code), a shell in the terminal, stop and start, the key
 * revoked (and refused from then on), the audit entries, every page with its controls labelled,
 * sign out and in again. Screenshots of each step go to .svc/artifacts/dashboard/.
 */
import { expect, layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import * as Fs from "node:fs"
import * as Os from "node:os"
import * as Path from "node:path"
import { chromium, type Page } from "playwright-core"
import { call } from "../../api/test/Sandboxes.support.ts"
import { Env, EnvLayer } from "../../api/test/SandboxesEnv.support.ts"
import { ensureBuilt } from "../scripts/build.ts"

const ARTIFACTS = Path.resolve(import.meta.dirname, "../../../.svc/artifacts/dashboard")

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
const WAIT_MS = 90_000
const SANDBOX_WAIT_MS = 180_000

const promise = <A>(f: () => Promise<A>) => Effect.promise(f)

/** A fresh profile and browser for the scope. */
const browser = Effect.acquireRelease(
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

const screenshot = (page: Page, name: string) =>
  promise(() => page.screenshot({ path: Path.join(ARTIFACTS, `${name}.png`), fullPage: true }))

const heading = (page: Page, name: string) =>
  promise(() => page.getByRole("heading", { level: 1, name, exact: true }).waitFor())

const navigateTo = (page: Page, section: string) =>
  Effect.andThen(
    promise(() => page.getByRole("navigation", { name: "Sections" }).getByRole("link", { name: section }).click()),
    heading(page, section)
  )

/** Inputs without a label and buttons without a name on the current page (none expected). */
const unlabelled = (page: Page) =>
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

/** The row of the table that holds `text`. */
const row = (page: Page, text: string) => page.getByRole("row").filter({ hasText: text })

/** Accepts the next confirm() (deleting, revoking). */
const acceptNextDialog = (page: Page) => page.once("dialog", (dialog) => void dialog.accept())

layer(EnvLayer, { excludeTestServices: true, timeout: 180_000 })("the dashboard in chromium", (it) => {
  it.effect(
    "sign up, mint a key, a sandbox running live, exec, terminal, revoke, audit, every page, sign out and in",
    () =>
      Effect.gen(function*() {
        yield* promise(() => ensureBuilt({ quiet: true }))
        Fs.mkdirSync(ARTIFACTS, { recursive: true })
        const env = yield* Env
        const base = env.base
        const { context } = yield* browser
        const page = context.pages()[0] ?? (yield* promise(() => context.newPage()))
        const pageErrors: Array<string> = []
        const policyViolations: Array<string> = []
        page.on("pageerror", (error) => pageErrors.push(error.message))
        page.on("console", (message) => {
          if (message.text().includes("Content Security Policy")) policyViolations.push(message.text())
        })

        // Signed out: the sign-in page, which refuses a wrong password in words.
        yield* promise(() => page.goto(`${base}/`))
        yield* heading(page, "Sign in")
        expect(new URL(page.url()).pathname).toBe("/sign-in")
        yield* promise(() => page.getByLabel("Email", { exact: true }).fill("nobody@example.com"))
        yield* promise(() => page.getByLabel("Password", { exact: true }).fill("not-the-password"))
        yield* promise(() => page.getByRole("button", { name: "Sign in" }).click())
        const refused = page.getByRole("alert")
        yield* promise(() => refused.waitFor())
        expect(yield* promise(() => refused.textContent())).toContain("(unauthenticated)")
        yield* screenshot(page, "01-sign-in-refused")

        // Sign up: a session (an HttpOnly cookie the page cannot read) and the sandboxes page.
        const email = `e2e-${Date.now()}@example.com`
        const password = "correct horse battery staple"
        yield* promise(() => page.getByRole("link", { name: "Create an account" }).click())
        yield* heading(page, "Create an account")
        yield* promise(() => page.getByLabel("Email", { exact: true }).fill(email))
        yield* promise(() => page.getByLabel("Password", { exact: true }).fill(password))
        yield* promise(() => page.getByLabel("Organization name", { exact: true }).fill("Dashboard E2E"))
        yield* promise(() => page.getByRole("button", { name: "Create account" }).click())
        yield* heading(page, "Sandboxes")
        const cookies = yield* promise(() => context.cookies(base))
        const session = cookies.find((c) => c.name === "client.session_token")
        expect(session?.httpOnly).toBe(true)
        expect(session?.sameSite).toBe("Lax")
        expect(yield* promise(() => page.evaluate("document.cookie"))).not.toContain("client.session_token")
        yield* promise(() => page.getByRole("status", { name: "Live updates: Live" }).waitFor())
        yield* screenshot(page, "02-signed-up")

        // Mint a key: its token shown once, and it works.
        yield* navigateTo(page, "API keys")
        yield* promise(() => page.getByLabel("Key name", { exact: true }).fill("ci-key"))
        yield* promise(() => page.getByRole("button", { name: "Mint key" }).click())
        const tokenBox = page.getByRole("textbox", { name: "Token of ci-key" })
        yield* promise(() => tokenBox.waitFor())
        const token = yield* promise(() => tokenBox.inputValue())
        expect(token).toMatch(/^svc_live_[A-Za-z0-9]{32,}$/)
        yield* screenshot(page, "03-key-minted")
        const me = yield* call(base, "GET", "/v1/auth/me", { token })
        expect(me.status, me.text).toBe(200)
        expect(me.json.org.name).toBe("Dashboard E2E")
        expect(me.json.user.email).toBe(email)
        yield* promise(() => page.getByRole("button", { name: "Done, hide it" }).click())
        yield* promise(() => tokenBox.waitFor({ state: "detached" }))
        expect(yield* promise(() => page.content())).not.toContain(token)
        yield* promise(() => page.reload())
        yield* heading(page, "API keys")
        yield* promise(() => row(page, "ci-key").waitFor())
        expect(yield* promise(() => page.content())).not.toContain(token)
        expect(yield* promise(() => row(page, "ci-key").textContent())).toContain(token.slice(0, 17))

        // A sandbox: created pending, turning running on this page as the events arrive.
        yield* navigateTo(page, "Sandboxes")
        yield* promise(() => page.getByRole("status", { name: "Live updates: Live" }).waitFor())
        yield* promise(() => page.evaluate("window.__sameDocument = true"))
        yield* promise(() => page.getByLabel("Name", { exact: true }).fill("e2e-demo"))
        yield* promise(() => page.getByRole("button", { name: "Create sandbox" }).click())
        const sandboxRow = row(page, "e2e-demo")
        yield* promise(() => sandboxRow.waitFor())
        const sandboxId = yield* promise(() => sandboxRow.getAttribute("data-sandbox-id"))
        expect(sandboxId).toMatch(/^sbx_/)
        yield* promise(() =>
          sandboxRow.locator(".badge", { hasText: /^running$/ }).waitFor({ timeout: SANDBOX_WAIT_MS })
        )
        // The same document all along: no reload brought the state.
        expect(yield* promise(() => page.evaluate("window.__sameDocument"))).toBe(true)
        const record = yield* call(base, "GET", `/v1/sandboxes/${sandboxId}`, { token: env.org.token })
        expect(record.status).toBe(404) // another org's key: the sandbox is the new org's alone
        yield* screenshot(page, "04-sandbox-running")

        // The exec console: stdout, stderr and the exit code.
        yield* promise(() => sandboxRow.getByRole("link", { name: "e2e-demo" }).click())
        yield* heading(page, "Sandbox e2e-demo")
        yield* promise(() =>
          page.getByLabel("Command", { exact: true }).fill("echo hello-$((6*7)); echo oops >&2; exit 3")
        )
        yield* promise(() => page.getByRole("button", { name: "Run", exact: true }).click())
        yield* promise(() => page.getByRole("status").filter({ hasText: "Exit code 3" }).waitFor())
        expect(yield* promise(() => page.getByTestId("stdout").textContent())).toBe("hello-42\n")
        expect(yield* promise(() => page.getByTestId("stderr").textContent())).toBe("oops\n")
        yield* screenshot(page, "05-exec")

        // The terminal: a shell over the WebSocket, on the session cookie.
        yield* promise(() => page.getByRole("button", { name: "Open a terminal" }).click())
        yield* promise(() => page.getByRole("status").filter({ hasText: "Connected" }).waitFor())
        yield* promise(() => page.locator(".xterm-helper-textarea").focus())
        yield* promise(() => page.keyboard.type("echo term-$((2+3))"))
        yield* promise(() => page.keyboard.press("Enter"))
        yield* promise(() => page.locator(".xterm-rows", { hasText: "term-5" }).waitFor())
        yield* screenshot(page, "06-terminal")
        // Shift+Escape leaves the terminal for the page (no keyboard trap).
        yield* promise(() => page.keyboard.press("Shift+Escape"))
        const focused = yield* promise(() => page.evaluate("document.activeElement?.textContent"))
        expect(focused).toBe("Close the terminal")
        yield* promise(() => page.keyboard.press("Enter"))
        yield* promise(() => page.getByRole("button", { name: "Open a terminal" }).waitFor())

        // Stop and start from its page, the state following live.
        yield* promise(() => page.getByRole("button", { name: "Stop e2e-demo" }).click())
        yield* promise(() => page.getByRole("status", { name: "State: stopped" }).waitFor({ timeout: SANDBOX_WAIT_MS }))
        yield* promise(() => page.getByRole("button", { name: "Start e2e-demo" }).click())
        yield* promise(() => page.getByRole("status", { name: "State: running" }).waitFor({ timeout: SANDBOX_WAIT_MS }))
        yield* screenshot(page, "07-restarted")

        // Revoke the key: refused from then on.
        yield* navigateTo(page, "API keys")
        acceptNextDialog(page)
        yield* promise(() => row(page, "ci-key").getByRole("button", { name: "Revoke ci-key" }).click())
        yield* promise(() => row(page, "ci-key").getByText("Revoked").waitFor())
        const revoked = yield* call(base, "GET", "/v1/auth/me", { token })
        expect(revoked.status).toBe(401)
        expect(revoked.json.code).toBe("unauthenticated")
        yield* screenshot(page, "08-key-revoked")

        // The audit log has it all, and filters by action.
        yield* navigateTo(page, "Audit log")
        const entries = page.getByRole("table", { name: "Audit entries" })
        for (const action of ["auth.signed_up", "apikey.created", "apikey.revoked"]) {
          yield* promise(() => entries.getByRole("rowheader", { name: action, exact: true }).first().waitFor())
        }
        yield* screenshot(page, "09-audit")
        yield* promise(() => page.getByLabel("Action", { exact: true }).selectOption("apikey.revoked"))
        yield* promise(() => entries.getByRole("rowheader", { name: "apikey.created" }).waitFor({ state: "detached" }))
        const actions = yield* promise(() => entries.getByRole("rowheader").allTextContents())
        expect(actions).toEqual(["apikey.revoked"])

        // Every page answers, without an error, its controls labelled.
        for (
          const section of [
            "Sandboxes",
            "Templates",
            "Volumes",
            "Secrets",
            "API keys",
            "Webhooks",
            "Audit log",
            "Usage",
            "Organization"
          ]
        ) {
          yield* navigateTo(page, section)
          // Each page loads its data: its table is no longer busy (or its facts are shown).
          yield* promise(() => page.locator("main table[aria-busy=false], main dl").first().waitFor())
          expect(yield* promise(() => page.getByRole("alert").count()), section).toBe(0)
          expect(yield* unlabelled(page), section).toEqual([])
          yield* screenshot(page, `10-${section.toLowerCase().replace(/\s+/g, "-")}`)
        }

        // The keyboard: the first Tab lands on the skip link, which leads to the content.
        yield* promise(() => page.reload())
        yield* heading(page, "Organization")
        yield* promise(() => page.keyboard.press("Tab"))
        expect(yield* promise(() => page.evaluate("document.activeElement?.textContent"))).toBe("Skip to content")

        // Delete the sandbox from the list: its row goes away.
        yield* navigateTo(page, "Sandboxes")
        acceptNextDialog(page)
        yield* promise(() => row(page, "e2e-demo").getByRole("button", { name: "Delete e2e-demo" }).click())
        yield* promise(() => row(page, "e2e-demo").waitFor({ state: "detached", timeout: SANDBOX_WAIT_MS }))

        // Sign out (the session ends on the server too), then in again.
        yield* promise(() => page.getByRole("button", { name: "Sign out" }).click())
        yield* heading(page, "Sign in")
        const after = yield* promise(() => context.cookies(base))
        expect(after.find((c) => c.name === "client.session_token")).toBeUndefined()
        const stale = yield* call(base, "GET", "/v1/auth/me", {
          headers: { cookie: `client.session_token=${session!.value}` }
        })
        expect(stale.status).toBe(401)
        yield* promise(() => page.getByLabel("Email", { exact: true }).fill(email))
        yield* promise(() => page.getByLabel("Password", { exact: true }).fill(password))
        yield* promise(() => page.getByRole("button", { name: "Sign in" }).click())
        yield* heading(page, "Sandboxes")
        yield* screenshot(page, "11-signed-in-again")

        expect(pageErrors).toEqual([])
        expect(policyViolations).toEqual([])
      }).pipe(Effect.scoped),
    Duration.toMillis(Duration.minutes(10))
  )
})
