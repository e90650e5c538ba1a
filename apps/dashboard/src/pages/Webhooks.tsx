/**
 * Webhooks: the org's endpoints (create: the signing secret is shown once; pause, resume,
 * delete, send a test ping) and one webhook's deliveries, each attempt with its status,
 * response and error, retried by hand when it failed or was dead-lettered.
 */
import { useEffect, useState } from "preact/hooks"
import { del, get, patch, post, query } from "../api.ts"
import { Link } from "../router.tsx"
import {
  Checkbox,
  ErrorMessage,
  Field,
  Form,
  Pager,
  PageTitle,
  Select,
  ShownOnce,
  StateBadge,
  Status,
  Table,
  useAction,
  useResource,
  When
} from "../ui.tsx"
import type { CreatedWebhook, DeliveryList, EventName, Webhook as WebhookRecord, WebhookList } from "../wire.ts"

/** The events a webhook can subscribe to (the type fails to check if the API's list changes). */
const EVENTS = {
  "sandbox.created": true,
  "sandbox.state_updated": true,
  "sandbox.deleted": true,
  "template.state_updated": true,
  "org.usage_alert": true,
  "org.usage_limit_reached": true
} satisfies Record<Exclude<EventName, "ping">, true>

const CreateWebhook = (props: { readonly onCreated: (created: CreatedWebhook) => void }) => {
  const [url, setUrl] = useState("")
  const [events, setEvents] = useState<ReadonlyArray<string>>([])
  const action = useAction()
  const submit = () =>
    action.run(async () => {
      const created = await post<CreatedWebhook>("/v1/webhooks", {
        url,
        ...(events.length === 0 ? {} : { events })
      })
      setUrl("")
      setEvents([])
      props.onCreated(created)
    })
  return (
    <details class="panel" open>
      <summary>New webhook</summary>
      <Form label="Create a webhook" onSubmit={submit}>
        <Field
          label="Endpoint URL"
          type="url"
          required
          value={url}
          onValue={setUrl}
          placeholder="https://example.com/hooks"
        />
        <fieldset>
          <legend>Events (none checked: every event)</legend>
          {Object.keys(EVENTS).map((name) => (
            <Checkbox
              key={name}
              label={name}
              checked={events.includes(name)}
              onChecked={(on) => setEvents((list) => on ? [...list, name] : list.filter((e) => e !== name))}
            />
          ))}
        </fieldset>
        <button type="submit" disabled={action.pending}>Create webhook</button>
      </Form>
      <ErrorMessage error={action.error} />
    </details>
  )
}

const WebhookRow = (props: { readonly hook: WebhookRecord; readonly onChanged: () => void }) => {
  const { hook } = props
  const action = useAction()
  const [tested, setTested] = useState<string | undefined>(undefined)
  const test = () =>
    action.run(async () => {
      const { delivery_id } = await post<{ delivery_id: string }>(`/v1/webhooks/${hook.id}/test`)
      setTested(delivery_id)
    })
  const toggle = () =>
    action.run(async () => {
      await patch(`/v1/webhooks/${hook.id}`, { enabled: !hook.enabled })
      props.onChanged()
    })
  const remove = () => {
    if (!window.confirm(`Delete the webhook to ${hook.url}?`)) return
    void action.run(async () => {
      await del(`/v1/webhooks/${hook.id}`)
      props.onChanged()
    })
  }
  return (
    <tr>
      <th scope="row">
        <Link href={`/webhooks/${hook.id}`}>{hook.url}</Link>
        <div class="muted mono">{hook.id}</div>
      </th>
      <td class="mono">{hook.events.join(" ")}</td>
      <td>{hook.enabled ? "enabled" : "paused"}</td>
      <td>
        <When at={hook.createdAt} />
      </td>
      <td>
        <div class="actions">
          <button type="button" onClick={test} disabled={action.pending} aria-label={`Send a test to ${hook.url}`}>
            Test
          </button>
          <button type="button" onClick={toggle} disabled={action.pending}>
            {hook.enabled ? "Pause" : "Resume"} <span class="visually-hidden">{hook.url}</span>
          </button>
          <button
            type="button"
            class="danger"
            onClick={remove}
            disabled={action.pending}
            aria-label={`Delete ${hook.url}`}
          >
            Delete
          </button>
        </div>
        {tested === undefined ? null : (
          <Status>
            Test sent: <Link href={`/webhooks/${hook.id}`}>see its delivery</Link>
          </Status>
        )}
        <ErrorMessage error={action.error} />
      </td>
    </tr>
  )
}

export const Webhooks = () => {
  const hooks = useResource(() => get<WebhookList>("/v1/webhooks?limit=100"))
  const [secret, setSecret] = useState<CreatedWebhook | undefined>(undefined)
  const rows = hooks.data?.webhooks ?? []
  return (
    <section>
      <PageTitle>Webhooks</PageTitle>
      {secret === undefined ? null : (
        <ShownOnce
          label={`Signing secret of ${secret.url}`}
          value={secret.secret_returned_once}
          note="Copy it now: it is shown this once. Your endpoint checks x-svc-signature with it."
          onDone={() => setSecret(undefined)}
        />
      )}
      <CreateWebhook
        onCreated={(created) => {
          setSecret(created)
          void hooks.reload()
        }}
      />
      <ErrorMessage error={hooks.error} />
      <Table
        caption="Webhooks"
        columns={["Endpoint", "Events", "Status", "Created", "Actions"]}
        empty={hooks.data !== undefined && rows.length === 0}
        loading={hooks.data === undefined && hooks.error === undefined}
      >
        {rows.map((hook) => <WebhookRow key={hook.id} hook={hook} onChanged={hooks.reload} />)}
      </Table>
    </section>
  )
}

const RETRYABLE = new Set(["failed", "dead_letter"])
const REFRESH_MS = 3_000

const Retry = (props: { readonly hookId: string; readonly deliveryId: string; readonly onRetried: () => void }) => {
  const action = useAction()
  return (
    <>
      <button
        type="button"
        disabled={action.pending}
        onClick={() =>
          action.run(async () => {
            await post(`/v1/webhooks/${props.hookId}/deliveries/${props.deliveryId}/retry`)
            props.onRetried()
          })}
      >
        Retry <span class="visually-hidden">{props.deliveryId}</span>
      </button>
      <ErrorMessage error={action.error} />
    </>
  )
}

export const Webhook = (props: { readonly id: string }) => {
  const hook = useResource(() => get<WebhookRecord>(`/v1/webhooks/${props.id}`), [props.id])
  const [status, setStatus] = useState("")
  const [offset, setOffset] = useState(0)
  const deliveries = useResource(
    () => get<DeliveryList>(`/v1/webhooks/${props.id}/deliveries${query({ status, limit: 50, offset })}`),
    [props.id, status, offset]
  )
  const [follow, setFollow] = useState(true)
  // Deliveries have no event of their own: the page asks again every few seconds while shown.
  useEffect(() => {
    if (!follow) return
    const timer = setInterval(() => {
      if (document.visibilityState === "visible") void deliveries.reload()
    }, REFRESH_MS)
    return () => clearInterval(timer)
  }, [follow])
  const rows = deliveries.data?.deliveries ?? []
  return (
    <section>
      <p>
        <Link href="/webhooks">← Webhooks</Link>
      </p>
      <PageTitle>Deliveries to {hook.data?.url ?? props.id}</PageTitle>
      <ErrorMessage error={hook.error} />
      <div class="toolbar">
        <Select
          label="Status"
          value={status}
          onValue={(value) => {
            setStatus(value)
            setOffset(0)
          }}
          options={[
            ["", "All"],
            ["pending", "pending"],
            ["succeeded", "succeeded"],
            ["failed", "failed"],
            ["dead_letter", "dead letter"],
            ["retried", "retried"]
          ]}
        />
        <button type="button" onClick={deliveries.reload}>Refresh</button>
        <Checkbox label="Refresh every few seconds" checked={follow} onChecked={setFollow} />
      </div>
      <ErrorMessage error={deliveries.error} />
      <Table
        caption="Delivery attempts"
        columns={["When", "Event", "Attempt", "Status", "Response", "Duration", "Next attempt", "Actions"]}
        empty={deliveries.data !== undefined && rows.length === 0}
        loading={deliveries.data === undefined && deliveries.error === undefined}
        emptyText="No deliveries yet."
      >
        {rows.map((d) => (
          <tr key={d.id}>
            <td>
              <When at={d.createdAt} />
            </td>
            <th scope="row" class="mono">
              {d.event}
              <div class="muted">{d.delivery_id}</div>
            </th>
            <td>{d.attempt}</td>
            <td>
              <StateBadge state={d.status} />
            </td>
            <td>{d.response_code ?? d.error ?? "—"}</td>
            <td>{d.duration_ms === null ? "—" : `${d.duration_ms} ms`}</td>
            <td>
              <When at={d.next_attempt_at} />
            </td>
            <td>
              {RETRYABLE.has(d.status)
                ? <Retry hookId={props.id} deliveryId={d.delivery_id} onRetried={deliveries.reload} />
                : null}
            </td>
          </tr>
        ))}
      </Table>
      {deliveries.data === undefined ? null : <Pager page={deliveries.data} label="Deliveries" onOffset={setOffset} />}
    </section>
  )
}
