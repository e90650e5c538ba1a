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
import { Env, EnvLayer } from "@svc/api/testing/SandboxesEnv"
import { call } from "@svc/testing/TestHttp"
import { Duration, Effect } from "effect"
import {
  acceptNextDialog,
  click,
  fill,
  heading,
  navigateTo,
  openBrowser,
  promise,
  row,
  SANDBOX_WAIT_MS,
  screenshot,
  unlabelled
} from "./Browser.support.ts"

layer(EnvLayer, { excludeTestServices: true, timeout: 180_000 })("the dashboard in chromium", (it) => {
  it.effect(
    "sign up, mint a key, a sandbox running live, exec, terminal, revoke, audit, every page, sign out and in",
    () =>
      Effect.gen(function*() {
        const env = yield* Env
        const base = env.base
        const { context, page, pageErrors, policyViolations } = yield* openBrowser("dashboard")

        // Signed out: the sign-in page, which refuses a wrong password in words.
        yield* promise(() => page.goto(`${base}/`))
        yield* heading(page, "Sign in")
        expect(new URL(page.url()).pathname).toBe("/sign-in")
        yield* fill(page, "Email", "nobody@example.com")
        yield* fill(page, "Password", "not-the-password")
        yield* click(page, "Sign in")
        const refused = page.getByRole("alert")
        yield* promise(() => refused.waitFor())
        expect(yield* promise(() => refused.textContent())).toContain("(unauthenticated)")
        yield* screenshot(page, "01-sign-in-refused")

        // Sign up: a session (an HttpOnly cookie the page cannot read) and the sandboxes page.
        const email = `e2e-${Date.now()}@example.com`
        const password = "correct horse battery staple"
        yield* promise(() => page.getByRole("link", { name: "Create an account" }).click())
        yield* heading(page, "Create an account")
        yield* fill(page, "Email", email)
        yield* fill(page, "Password", password)
        yield* fill(page, "Organization name", "Dashboard E2E")
        yield* click(page, "Create account")
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
        yield* fill(page, "Key name", "ci-key")
        yield* click(page, "Mint key")
        const tokenBox = page.getByRole("textbox", { name: "Token of ci-key" })
        yield* promise(() => tokenBox.waitFor())
        const token = yield* promise(() => tokenBox.inputValue())
        expect(token).toMatch(/^svc_live_[A-Za-z0-9]{32,}$/)
        yield* screenshot(page, "03-key-minted")
        const me = yield* call(base, "GET", "/v1/auth/me", { token })
        expect(me.status, me.text).toBe(200)
        expect(me.json.org.name).toBe("Dashboard E2E")
        expect(me.json.user.email).toBe(email)
        yield* click(page, "Done, hide it")
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
        yield* fill(page, "Name", "e2e-demo")
        yield* click(page, "Create sandbox")
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
        yield* click(page, "Open a terminal")
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
        yield* click(page, "Stop e2e-demo")
        yield* promise(() => page.getByRole("status", { name: "State: stopped" }).waitFor({ timeout: SANDBOX_WAIT_MS }))
        yield* click(page, "Start e2e-demo")
        yield* promise(() => page.getByRole("status", { name: "State: running" }).waitFor({ timeout: SANDBOX_WAIT_MS }))
        yield* screenshot(page, "07-restarted")

        // An app: deployed, its replica ready (live), scaled to none, deleted.
        yield* navigateTo(page, "Apps")
        yield* promise(() => page.getByText("Deploy an app").click())
        yield* fill(page, "App name", "e2e-web")
        yield* fill(page, "Command", "sleep 100000")
        yield* click(page, "Deploy app")
        const appRow = row(page, "e2e-web")
        yield* promise(() => appRow.getByText("1 of 1 ready").waitFor({ timeout: SANDBOX_WAIT_MS }))
        yield* promise(() => appRow.getByRole("link", { name: /^sbx_/ }).waitFor())
        yield* screenshot(page, "075-app-ready")
        yield* fill(page, "Replicas of e2e-web", "0")
        yield* click(page, "Scale")
        yield* promise(() => appRow.getByText("0 of 0 ready").waitFor({ timeout: SANDBOX_WAIT_MS }))
        acceptNextDialog(page)
        yield* click(page, "Delete e2e-web")
        yield* promise(() => appRow.waitFor({ state: "detached", timeout: SANDBOX_WAIT_MS }))

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
        for (const action of ["auth.signed_up", "apikey.created", "apikey.revoked", "app.created", "app.deleted"]) {
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
            "Apps",
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
        yield* click(page, "Sign out")
        yield* heading(page, "Sign in")
        const after = yield* promise(() => context.cookies(base))
        expect(after.find((c) => c.name === "client.session_token")).toBeUndefined()
        const stale = yield* call(base, "GET", "/v1/auth/me", {
          headers: { cookie: `client.session_token=${session!.value}` }
        })
        expect(stale.status).toBe(401)
        // A page opened signed out asks to sign in first, then shows that page.
        yield* promise(() => page.goto(`${base}/audit`))
        yield* heading(page, "Sign in")
        yield* fill(page, "Email", email)
        yield* fill(page, "Password", password)
        yield* click(page, "Sign in")
        yield* heading(page, "Audit log")
        yield* promise(() => page.getByRole("rowheader", { name: "auth.signed_out", exact: true }).first().waitFor())
        yield* screenshot(page, "11-signed-in-again")

        expect(pageErrors).toEqual([])
        expect(policyViolations).toEqual([])
      }).pipe(Effect.scoped),
    Duration.toMillis(Duration.minutes(10))
  )
})
