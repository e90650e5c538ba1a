/**
 * Usage and limits (billing): this month's spend, the hard limit (blocks creating and starting
 * sandboxes once reached) and the alert value, in dollars here and in micros on the wire.
 */
import { useState } from "preact/hooks"
import { get, put } from "../api.ts"
import { useEvents } from "../events.ts"
import { dollars, ErrorMessage, Field, Form, PageTitle, Status, useAction, useResource, When } from "../ui.tsx"
import type { Usage as UsageRecord } from "../wire.ts"

/** "12.5" dollars → 12500000 micros; "" → null (no limit). */
export const toMicros = (text: string): number | null => {
  if (text.trim() === "") return null
  if (!/^\d+(\.\d{1,6})?$/.test(text.trim())) throw new Error(`${text} is not an amount in dollars (like 12.50)`)
  const [whole = "0", fraction = ""] = text.trim().split(".")
  return Number(whole) * 1_000_000 + Number(fraction.padEnd(6, "0").slice(0, 6))
}

const fromMicros = (micros: number | null) =>
  micros === null ? "" : (micros / 1_000_000).toFixed(6).replace(/\.?0+$/, "")

/** Shown once the limits are known: what is typed is never overwritten by a late answer. */
const LimitsForm = (props: { readonly usage: UsageRecord; readonly onSaved: (usage: UsageRecord) => void }) => {
  const [hard, setHard] = useState(fromMicros(props.usage.hard_limit_micros))
  const [alert, setAlert] = useState(fromMicros(props.usage.alert_micros))
  const [saved, setSaved] = useState(false)
  const action = useAction()
  const save = () =>
    action.run(async () => {
      setSaved(false)
      props.onSaved(
        await put<UsageRecord>("/v1/billing/limits", {
          hard_limit_micros: toMicros(hard),
          alert_micros: toMicros(alert)
        })
      )
      setSaved(true)
    })
  return (
    <>
      <Form label="Limits" onSubmit={save} class="form inline">
        <Field
          label="Hard limit (USD)"
          inputMode="decimal"
          pattern="\d+(\.\d{1,6})?"
          value={hard}
          onValue={setHard}
          hint="Empty: no limit."
        />
        <Field
          label="Alert at (USD)"
          inputMode="decimal"
          pattern="\d+(\.\d{1,6})?"
          value={alert}
          onValue={setAlert}
          hint="Empty: no alert."
        />
        <button type="submit" disabled={action.pending}>Save limits</button>
      </Form>
      <ErrorMessage error={action.error} />
      {saved ? <Status>Limits saved.</Status> : null}
    </>
  )
}

export const Usage = () => {
  const usage = useResource(() => get<UsageRecord>("/v1/billing/usage"))
  useEvents("org.", () => void usage.reload())
  const u = usage.data
  return (
    <section>
      <PageTitle>Usage</PageTitle>
      <ErrorMessage error={usage.error} />
      {u === undefined ? null : (
        <>
          <dl class="facts">
            <dt>This period</dt>
            <dd>
              <When at={u.period_start} /> to <When at={u.period_end} />
            </dd>
            <dt>Spend</dt>
            <dd data-testid="spend">{dollars(u.spend_micros)}</dd>
            <dt>Hard limit</dt>
            <dd>{dollars(u.hard_limit_micros)}</dd>
            <dt>Alert at</dt>
            <dd>{dollars(u.alert_micros)}</dd>
            <dt>Blocked</dt>
            <dd>{u.blocked ? "yes: sandboxes cannot be created or started" : "no"}</dd>
          </dl>
          <LimitsForm usage={u} onSaved={usage.setData} />
        </>
      )}
    </section>
  )
}
