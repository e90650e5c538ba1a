/**
 * The dashboard's templates page (src/pages/Templates.tsx) in chromium, against the API, a real
 * agent and a real registry (@svc/api/testing/Registries): a template made from an image
 * reference through the form becomes `ready` on the page (live, from `template.state_updated`)
 * with its reference shown and its log naming the pulled layer; a missing tag ends `failed` with
 * the reason on the row.
 */
import { expect, layer } from "@effect/vitest"
import { push, Registries, TestLayer } from "@svc/api/testing/Registries"
import { Env } from "@svc/api/testing/SandboxesEnv"
import { Duration, Effect } from "effect"
import { click, fill, navigateTo, openBrowser, promise, row, screenshot, signUp } from "./Browser.support.ts"

layer(TestLayer, { excludeTestServices: true, timeout: 300_000 })(
  "the dashboard's templates page in chromium",
  (it) => {
    it.effect(
      "a template from an image reference: built, ready on the page with its reference; a missing tag failed with the reason",
      () =>
        Effect.gen(function*() {
          const { base } = yield* Env
          const { open } = yield* Registries
          yield* push(open, "dash/app", "1", {
            layers: [{ files: { "srv/app.txt": "from the dashboard's image\n", "srv/": null } }]
          })
          const image = `${open.host}/dash/app:1`
          const { page, pageErrors, policyViolations, requestFailures } = yield* openBrowser("templates")
          yield* signUp(page, base, {
            email: `templates-${Date.now()}@example.com`,
            password: "a long enough password",
            org: "Templates E2E"
          })

          yield* navigateTo(page, "Templates")
          const build = (name: string, reference: string) =>
            Effect.gen(function*() {
              yield* fill(page, "Template name", name)
              yield* promise(() => page.getByLabel("Start from", { exact: true }).selectOption("image"))
              yield* fill(page, "Image", reference)
              yield* click(page, "Build template")
              yield* promise(() => page.getByRole("status").filter({ hasText: `Building ${name}.` }).waitFor())
            })
          yield* promise(() => page.getByText("Build a template").click())
          yield* build("dash-image", image)
          const ready = row(page, "dash-image")
          yield* promise(() => ready.getByText("ready", { exact: true }).waitFor({ timeout: 120_000 }))
          expect(yield* promise(() => ready.getByText(image, { exact: true }).count()), requestFailures.join("\n"))
            .toBe(1)
          yield* promise(() => ready.getByRole("button", { name: "Show log of dash-image" }).click())
          // The log is fetched once the panel opens: wait for its lines, not the "Loading…" before them.
          const pulled = /layer 1\/1 sha256:[0-9a-f]{12} pulled/
          yield* promise(() => page.getByLabel("Build log").filter({ hasText: pulled }).waitFor({ timeout: 30_000 }))
          expect(yield* promise(() => page.getByLabel("Build log").textContent())).toMatch(pulled)
          yield* screenshot(page, "40-template-from-image")

          yield* build("dash-missing", `${open.host}/dash/app:no-such-tag`)
          const failed = row(page, "dash-missing")
          yield* promise(() =>
            failed.getByText(`the image dash/app:no-such-tag was not found in ${open.host}`).waitFor({
              timeout: Duration.toMillis(Duration.minutes(2))
            })
          )
          expect(yield* promise(() => failed.getByText("failed", { exact: true }).count())).toBe(1)

          expect(pageErrors).toEqual([])
          expect(policyViolations).toEqual([])
        }).pipe(Effect.scoped)
    )
  }
)
