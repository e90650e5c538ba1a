/**
 * The dashboard's account pages in chromium, against the API on real Postgres and NATS: the
 * organization renamed (the header follows, the audit log records it), usage limits saved and a
 * malformed amount refused, a secret created (its value never on the page), rotated, its hosts
 * changed and deleted, a volume created and deleted and an oversized one refused in the API's
 * words, a template with a malformed name refused.
 */
import { expect, layer } from "@effect/vitest"
import * as Server from "@svc/api/Server"
import { SecretBox } from "@svc/crypto/SecretBox"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { serve } from "@svc/testing/TestHttp"
import * as TestNats from "@svc/testing/TestNats"
import { Context, Duration, Effect, Layer } from "effect"
import { HttpRouter } from "effect/http"
import {
  acceptNextDialog,
  click,
  fill,
  navigateTo,
  openBrowser,
  promise,
  row,
  screenshot,
  signUp
} from "./Browser.support.ts"

class Env extends Context.Service<Env, { readonly base: string }>()("dashboard/test/Account/Env") {}

const EnvLayer = Layer.effect(
  Env,
  Effect.map(
    serve(
      HttpRouter.serve(Server.Routes, { disableListenLog: true, disableLogger: true }).pipe(
        Layer.provide(SecretBox.layer),
        Layer.provide(Layer.mergeAll(TestDatabase.layer, TestNats.layer))
      )
    ),
    (base) => Env.of({ base })
  )
)

layer(EnvLayer, { excludeTestServices: true, timeout: 180_000 })("the dashboard's account pages in chromium", (it) => {
  it.effect(
    "organization, usage limits, secrets, volumes and templates: changes shown, refusals in words",
    () =>
      Effect.gen(function*() {
        const { base } = yield* Env
        const { page, pageErrors, policyViolations, requestFailures } = yield* openBrowser("account")
        yield* signUp(page, base, {
          email: `account-${Date.now()}@example.com`,
          password: "a long enough password",
          org: "Account E2E"
        })

        // The organization: renamed, the header follows, the audit log has it.
        yield* navigateTo(page, "Organization")
        yield* fill(page, "Organization name", "Renamed Org")
        yield* click(page, "Rename")
        yield* promise(() => page.getByRole("status").filter({ hasText: "Saved." }).waitFor())
        yield* promise(() => page.getByRole("banner").getByText("Renamed Org", { exact: true }).waitFor())
        yield* navigateTo(page, "Audit log")
        yield* promise(() => page.getByRole("rowheader", { name: "org.updated", exact: true }).waitFor())

        // Usage: limits saved (shown in dollars), a malformed amount refused before it is sent.
        yield* navigateTo(page, "Usage")
        yield* fill(page, "Hard limit (USD)", "50")
        yield* fill(page, "Alert at (USD)", "40.5")
        yield* click(page, "Save limits")
        yield* promise(() => page.getByRole("status").filter({ hasText: "Limits saved." }).waitFor())
        const facts = page.locator("main dl")
        yield* promise(() => facts.getByText("$50.00", { exact: true }).waitFor())
        yield* promise(() => facts.getByText("$40.50", { exact: true }).waitFor())
        yield* screenshot(page, "30-usage-limits")

        // Secrets: created (the value never on the page), rotated, hosts changed, deleted.
        const value = `sk-${Date.now()}-never-shown`
        yield* navigateTo(page, "Secrets")
        yield* promise(() => page.getByText("New secret").click())
        yield* fill(page, "Secret name", "openai")
        yield* fill(page, "Value", value)
        yield* fill(page, "Allowed hosts", "api.openai.com")
        yield* click(page, "Create secret")
        const secretRow = row(page, "openai")
        yield* promise(() => secretRow.waitFor())
        expect(yield* promise(() => secretRow.textContent())).toContain("Authorization: Bearer {value}")
        expect(yield* promise(() => page.content())).not.toContain(value)
        yield* click(page, "Edit openai")
        yield* fill(page, "New value", `${value}-2`)
        yield* click(page, "Rotate")
        yield* promise(() => page.getByRole("status").filter({ hasText: "Value rotated." }).waitFor())
        yield* promise(() =>
          page.getByRole("form", { name: "Hosts of openai" }).getByLabel("Allowed hosts").fill(
            "api.openai.com *.openai.com"
          )
        )
        yield* click(page, "Save hosts")
        yield* promise(() => secretRow.getByText("api.openai.com *.openai.com").waitFor())
        yield* screenshot(page, "31-secrets")
        acceptNextDialog(page)
        yield* click(page, "Delete openai")
        yield* promise(() => secretRow.waitFor({ state: "detached" }))
        yield* navigateTo(page, "Audit log")
        for (const action of ["secret.created", "secret.rotated", "secret.updated", "secret.deleted"]) {
          yield* promise(() => page.getByRole("rowheader", { name: action, exact: true }).waitFor())
        }

        // Volumes: an oversized one refused in the API's words, a small one created, deleted.
        yield* navigateTo(page, "Volumes")
        yield* promise(() => page.getByText("New volume").click())
        yield* fill(page, "Volume name", "scratch")
        yield* fill(page, "Size (GiB)", "100000")
        yield* click(page, "Create volume")
        const refused = page.getByRole("alert")
        yield* promise(() => refused.waitFor())
        expect(yield* promise(() => refused.textContent()), requestFailures.join("\n")).toContain(
          "(volume_capacity_above_max)"
        )
        yield* fill(page, "Size (GiB)", "1")
        yield* click(page, "Create volume")
        const volumeRow = row(page, "scratch")
        yield* promise(() => volumeRow.waitFor())
        expect(yield* promise(() => volumeRow.textContent())).toContain("1 GiB")
        yield* promise(() => refused.waitFor({ state: "detached" }))
        yield* screenshot(page, "32-volumes")
        acceptNextDialog(page)
        yield* click(page, "Delete scratch")
        yield* promise(() => volumeRow.waitFor({ state: "detached" }))

        // Templates: a malformed name refused, naming the field.
        yield* navigateTo(page, "Templates")
        yield* promise(() => page.getByText("Build a template").click())
        yield* fill(page, "Template name", "Not A Valid Name!")
        yield* click(page, "Build template")
        const templateRefused = page.getByRole("alert")
        yield* promise(() => templateRefused.waitFor())
        const words = yield* promise(() => templateRefused.textContent())
        expect(words, requestFailures.join("\n")).toContain("(invalid_request)")
        expect(words).toContain("name")
        yield* screenshot(page, "33-template-refused")

        expect(pageErrors).toEqual([])
        expect(policyViolations).toEqual([])
      }).pipe(Effect.scoped),
    Duration.toMillis(Duration.minutes(10))
  )
})
