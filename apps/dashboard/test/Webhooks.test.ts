/**
 * The dashboard's webhook pages in chromium, against the API with the outbox relay and a real
 * dispatcher delivering to a receiver on 127.0.0.1 (allowed by SVC_WEBHOOK_ALLOWED_SUBNETS):
 * create a webhook (its signing secret shown once, and the one the receiver's requests are
 * signed with), send a test, see the failed delivery arrive on its page, retry it and see it
 * succeed, pause, resume and delete it. A URL the API refuses is refused in words.
 */
import { expect, layer } from "@effect/vitest"
import * as Server from "@svc/api/Server"
import { SecretBox } from "@svc/crypto/SecretBox"
import { OutboxRelay } from "@svc/events/Relay"
import * as TestDatabase from "@svc/testing/TestDatabase"
import { serve } from "@svc/testing/TestHttp"
import * as TestNats from "@svc/testing/TestNats"
import { receiver } from "@svc/testing/WebhookReceiver"
import { WebhookSender } from "@svc/webhooks/Delivery/Attempt"
import { WebhookDispatcher } from "@svc/webhooks/Delivery/WebhookDispatcher"
import { WebhookAddressGuard } from "@svc/webhooks/Subscriptions/AddressGuard"
import { ConfigProvider, Context, Duration, Effect, Layer } from "effect"
import { HttpRouter } from "effect/http"
import * as Crypto from "node:crypto"
import {
  acceptNextDialog,
  click,
  fill,
  heading,
  navigateTo,
  openBrowser,
  promise,
  row,
  screenshot,
  signUp,
  unlabelled
} from "./Browser.support.ts"

const SETTINGS = ConfigProvider.layerAdd(
  ConfigProvider.fromUnknown({
    SVC_WEBHOOK_ALLOWED_SUBNETS: "127.0.0.0/8",
    // The automatic second attempt far away: a failed delivery stays failed until retried here.
    SVC_WEBHOOK_RETRY_SCHEDULE: "10m,10m,10m,10m,10m",
    SVC_WEBHOOK_ATTEMPT_TIMEOUT: "5s"
  }),
  { asPrimary: true }
)

class Env extends Context.Service<Env, { readonly base: string }>()("dashboard/test/Webhooks/Env") {}

const EnvLayer = Layer.effect(
  Env,
  Effect.gen(function*() {
    const platform = yield* Layer.build(Layer.mergeAll(TestDatabase.layer, TestNats.layer, SecretBox.layer))
    yield* Layer.build(
      Layer.mergeAll(
        OutboxRelay.layerWith({ pollInterval: Duration.millis(200) }),
        WebhookDispatcher.layer.pipe(Layer.provide(WebhookSender.layer), Layer.provide(WebhookAddressGuard.layer))
      ).pipe(Layer.provide(SETTINGS), Layer.provide(Layer.succeedContext(platform)))
    )
    const base = yield* serve(
      HttpRouter.serve(Server.Routes, { disableListenLog: true, disableLogger: true }).pipe(
        Layer.provide(SETTINGS),
        Layer.provide(Layer.succeedContext(platform))
      )
    )
    return Env.of({ base })
  })
)

layer(EnvLayer, { excludeTestServices: true, timeout: 180_000 })("the dashboard's webhooks in chromium", (it) => {
  it.effect(
    "create (secret shown once), test, the failed delivery, retry, succeeded; pause, resume, delete",
    () =>
      Effect.gen(function*() {
        const { base } = yield* Env
        const { page, pageErrors, policyViolations } = yield* openBrowser("webhooks")
        const rx = yield* receiver(() => ({ status: 500 }))
        yield* signUp(page, base, {
          email: `hooks-${Date.now()}@example.com`,
          password: "a long enough password",
          org: "Hooks E2E"
        })

        // A URL the API refuses: its words on the page.
        yield* navigateTo(page, "Webhooks")
        yield* fill(page, "Endpoint URL", "ftp://example.com/hooks")
        yield* click(page, "Create webhook")
        // The browser's own check (type=url) lets ftp: through: the API's answer is shown.
        const refused = page.getByRole("alert")
        yield* promise(() => refused.waitFor())
        expect(yield* promise(() => refused.textContent())).toContain("(invalid_webhook_url)")

        // Create: the signing secret shown once.
        yield* fill(page, "Endpoint URL", rx.url)
        yield* promise(() => page.getByRole("checkbox", { name: "sandbox.deleted" }).check())
        yield* click(page, "Create webhook")
        const secretBox = page.getByRole("textbox", { name: `Signing secret of ${rx.url}` })
        yield* promise(() => secretBox.waitFor())
        const secret = yield* promise(() => secretBox.inputValue())
        expect(secret.length).toBeGreaterThan(16)
        yield* screenshot(page, "20-webhook-created")
        yield* click(page, "Done, hide it")
        yield* promise(() => secretBox.waitFor({ state: "detached" }))
        expect(yield* promise(() => page.content())).not.toContain(secret)
        const hookRow = row(page, rx.url)
        expect(yield* promise(() => hookRow.textContent())).toContain("sandbox.deleted")
        expect(yield* unlabelled(page)).toEqual([])

        // Test: a signed ping reaches the receiver (which answers 500).
        yield* click(page, `Send a test to ${rx.url}`)
        yield* promise(() => page.getByRole("status").filter({ hasText: "Test sent" }).waitFor())
        yield* promise(() => rx.waitFor(1, 90_000))
        const ping = rx.received[0]!
        expect(ping.headers["x-svc-event"]).toBe("ping")
        expect(ping.headers["x-svc-signature"]).toBe(
          "sha256=" + Crypto.createHmac("sha256", secret).update(ping.body).digest("hex")
        )

        // Its page: the failed attempt arrives without a reload, then a retry succeeds.
        yield* promise(() => page.getByRole("link", { name: "see its delivery" }).click())
        yield* heading(page, `Deliveries to ${rx.url}`)
        const deliveryId = String(ping.headers["x-svc-delivery-id"])
        const attempts = page.getByRole("table", { name: "Delivery attempts" })
        const failed = attempts.getByRole("row").filter({ hasText: "failed" })
        yield* promise(() => failed.waitFor())
        expect(yield* promise(() => failed.textContent())).toContain("500")
        expect(yield* promise(() => failed.textContent())).toContain(deliveryId)
        yield* screenshot(page, "21-delivery-failed")
        expect(yield* unlabelled(page)).toEqual([])
        rx.setReply(() => ({ status: 204 }))
        yield* click(page, `Retry ${deliveryId}`)
        yield* promise(() => attempts.getByRole("row").filter({ hasText: "succeeded" }).waitFor())
        yield* promise(() => rx.waitFor(2, 90_000))
        expect(rx.received[1]!.headers["x-svc-delivery-id"]).toBe(deliveryId)
        // A delivery that succeeded offers no retry.
        yield* promise(() => page.getByRole("button", { name: `Retry ${deliveryId}` }).waitFor({ state: "detached" }))
        yield* screenshot(page, "22-delivery-retried")

        // The failed attempt is now marked retried; filtered by status, only the success is left.
        const retried = attempts.locator(".badge", { hasText: "retried" })
        yield* promise(() => retried.waitFor())
        yield* promise(() => page.getByLabel("Status", { exact: true }).selectOption("succeeded"))
        yield* promise(() => retried.waitFor({ state: "detached" }))
        const statuses = yield* promise(() => attempts.locator(".badge").allTextContents())
        expect(statuses).toEqual(["succeeded"])

        // Pause, resume, delete.
        yield* promise(() => page.getByRole("link", { name: "← Webhooks" }).click())
        yield* heading(page, "Webhooks")
        yield* promise(() => hookRow.getByRole("button", { name: `Pause ${rx.url}` }).click())
        yield* promise(() => hookRow.getByRole("cell", { name: "paused" }).waitFor())
        yield* promise(() => hookRow.getByRole("button", { name: `Resume ${rx.url}` }).click())
        yield* promise(() => hookRow.getByRole("cell", { name: "enabled" }).waitFor())
        acceptNextDialog(page)
        yield* click(page, `Delete ${rx.url}`)
        yield* promise(() => hookRow.waitFor({ state: "detached" }))
        yield* promise(() => page.getByText("Nothing yet.").waitFor())

        expect(pageErrors).toEqual([])
        expect(policyViolations).toEqual([])
      }).pipe(Effect.scoped),
    Duration.toMillis(Duration.minutes(10))
  )
})
