/**
 * A sandbox's metrics and log on its page in chromium, against the API with the runtime and a
 * real agent sampling every 300 ms: the charts drawn with data points (CPU, memory, disk,
 * processes, network), the log's lifecycle lines, and a line written after the page opened
 * arriving while it is open (the log followed).
 */
import { expect, layer } from "@effect/vitest"
import { Env, makeEnvLayer } from "@svc/api/testing/SandboxesEnv"
import { Effect } from "effect"
import {
  click,
  fill,
  heading,
  openBrowser,
  promise,
  row,
  SANDBOX_WAIT_MS,
  screenshot,
  signUp
} from "./Browser.support.ts"

layer(makeEnvLayer({ metricsIntervalMs: 300 }), { excludeTestServices: true, timeout: 240_000 })(
  "a sandbox's metrics and log in chromium",
  (it) => {
    it.effect("the charts drawn with data points and the log followed on a running sandbox's page", () =>
      Effect.gen(function*() {
        const { base } = yield* Env
        const { page, pageErrors, policyViolations } = yield* openBrowser("sandbox-telemetry")
        yield* signUp(page, base, {
          email: `telemetry-${Date.now()}@example.com`,
          password: "a long enough password",
          org: "Telemetry E2E"
        })
        yield* fill(page, "Name", "watched")
        yield* click(page, "Create sandbox")
        const sandboxRow = row(page, "watched")
        yield* promise(() =>
          sandboxRow.locator(".badge", { hasText: /^running$/ }).waitFor({ timeout: SANDBOX_WAIT_MS })
        )
        yield* promise(() => sandboxRow.getByRole("link", { name: "watched" }).click())
        yield* heading(page, "Sandbox watched")

        // The charts: five of them, each with a line of several points once samples came.
        const charts = page.getByTestId("metric-chart")
        yield* promise(() => page.getByRole("heading", { name: "Metrics and log" }).waitFor())
        // (Located, not evaluated: the page's Content-Security-Policy refuses evaluated strings.)
        const drawn = page.locator("[data-testid=metric-chart]:not([data-points='0']):not([data-points='1'])")
        yield* promise(() => drawn.nth(4).waitFor({ timeout: 60_000 }))
        expect(yield* promise(() => charts.count())).toBe(5)
        const titles = yield* promise(() => charts.locator("figcaption strong").allTextContents())
        expect(titles).toEqual(["CPU", "Memory", "Disk", "Processes", "Network"])
        for (const title of titles) {
          const chart = charts.filter({ hasText: title })
          const points = yield* promise(() => chart.locator("polyline").first().getAttribute("points"))
          expect(points!.trim().split(" ").length).toBeGreaterThanOrEqual(2)
          expect(points).toMatch(/^\d+(\.\d)?,\d+(\.\d)?( \d+(\.\d)?,\d+(\.\d)?)+$/)
          // Its caption says the latest value in words (the chart's accessible name).
          expect(yield* promise(() => chart.getByRole("img").getAttribute("aria-labelledby"))).toBeTruthy()
        }
        expect(yield* promise(() => charts.filter({ hasText: "Memory" }).locator("figcaption").textContent()))
          .toMatch(/used \d+(\.\d)? (B|KiB|MiB) of \d+(\.\d)? (MiB|GiB)/)

        // The log: the lifecycle lines, followed.
        const log = page.getByRole("log", { name: "Sandbox log" })
        yield* promise(() => log.filter({ hasText: "lifecycle: started" }).waitFor({ timeout: 60_000 }))
        expect(yield* promise(() => log.textContent())).toMatch(/lifecycle: starting/)
        yield* promise(() => page.getByRole("status").filter({ hasText: "Following the log." }).waitFor())
        yield* screenshot(page, "sandbox-telemetry")

        // Stopped from its page: the stop arrives in the open log.
        yield* click(page, "Stop watched")
        yield* promise(() => log.filter({ hasText: /lifecycle: stopped/ }).waitFor({ timeout: 60_000 }))
        yield* screenshot(page, "sandbox-telemetry-stopped")
        expect(pageErrors).toEqual([])
        expect(policyViolations).toEqual([])
      }).pipe(Effect.scoped))
  }
)
