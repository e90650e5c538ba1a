/**
 * Settings of the app controller, read by the runtime (docs/contract.md#apps):
 *
 * | variable | default | meaning |
 * |---|---|---|
 * | `SVC_APP_RECONCILE_INTERVAL` | 5s | how often every app is reconciled: its replicas' sandboxes and `cmd`s checked (a `cmd` that exited is noticed within this time; a sandbox's change at once, through its event), backoffs expired |
 */
import * as Env from "@svc/config/Env"
import { Duration } from "effect"

export const AppReconcileInterval = Env.duration("SVC_APP_RECONCILE_INTERVAL", Duration.seconds(5), {
  min: Duration.millis(100),
  max: Duration.minutes(10)
})

export const settings: ReadonlyArray<Env.AnySetting> = [AppReconcileInterval]
