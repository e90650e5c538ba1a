/**
 * `@svc/sdk`: the Promise client (`Svc`), its errors (`SvcError`), webhook verification. The
 * Effect client is `@svc/sdk/Effect`.
 */
export * from "./Svc.ts"
export {
  checkWebhookSignature,
  verifyWebhook,
  type VerifyWebhookOptions,
  WEBHOOK_DELIVERY_ID_HEADER,
  WEBHOOK_EVENT_HEADER,
  WEBHOOK_ID_HEADER,
  WEBHOOK_SIGNATURE_HEADER,
  WebhookSignatureError
} from "./Webhooks.ts"
