/**
 * The secret routes (docs/contract.md#secrets, #secrets-scopes). `secrets:read` lists and reads
 * metadata; `secrets:write` creates, rotates and deletes (it implies read, not use); a PATCH of
 * `allowed_hosts` or `header_name` needs `secrets:use` too (checked by the handler: it depends on
 * the body). A userless service key manages secrets only when listed in
 * `SVC_SECRET_MANAGER_API_KEY_IDS` and holding write and use (403 `secret_manager_not_allowed`).
 * Another org's secret is 404. A value is accepted, never returned.
 */
import { Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "effect/http-api"
import {
  Conflict,
  IdempotencyKeyReused,
  InsufficientScope,
  InvalidRequest,
  NotFound,
  SecretManagerNotAllowed,
  Unavailable
} from "../Errors.ts"
import { SecretId } from "../Ids.ts"
import { ListQuery } from "../Pagination.ts"
import { CreateSecretRequest, PatchSecretRequest, RotateSecretRequest, Secret, SecretList } from "../Secret.ts"
import { Access } from "./Auth.ts"
import { IdempotencyKey } from "./Sandboxes.ts"

export class CreateSecretBody
  extends Schema.Class<CreateSecretBody>("CreateSecretRequest")(CreateSecretRequest.fields)
{}

export class RotateSecretBody
  extends Schema.Class<RotateSecretBody>("RotateSecretRequest")(RotateSecretRequest.fields)
{}

export class PatchSecretBody extends Schema.Class<PatchSecretBody>("PatchSecretRequest")(PatchSecretRequest.fields) {}

const params = { id: SecretId }

export class SecretsApi extends HttpApiGroup.make("secrets")
  .add(
    HttpApiEndpoint.post("create", "/v1/secrets", {
      payload: CreateSecretBody,
      headers: { "idempotency-key": Schema.optionalKey(IdempotencyKey) },
      success: Secret.pipe(HttpApiSchema.status(201)),
      error: [InvalidRequest, SecretManagerNotAllowed, Conflict, IdempotencyKeyReused, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "Stores `value` sealed; 201 with the metadata, never the value. The egress proxy writes " +
        "`header_name: header_format` (`{value}` replaced by the value; default `Authorization: Bearer {value}`) " +
        "onto the requests of sandboxes the secret is bound to, to `allowed_hosts` only: `host` or `*.domain` " +
        "(HTTPS on port 443), `host:port` (HTTPS on that port), `http://host[:port]` (plain HTTP, port 80 by " +
        "default; the value then crosses the network in clear). Names are unique in the org (409). `Idempotency-Key`: the same key and body within " +
        "24 h answer 200 with the first response; another body is 422 `idempotency_key_reused`."
    })),
    HttpApiEndpoint.get("list", "/v1/secrets", {
      query: ListQuery,
      success: SecretList,
      error: [InvalidRequest, Unavailable]
    }).annotateMerge(OpenApi.annotations({ description: "The org's secrets, newest first; metadata only." })),
    HttpApiEndpoint.get("get", "/v1/secrets/:id", {
      params,
      success: Secret,
      error: [NotFound, Unavailable]
    }),
    HttpApiEndpoint.put("rotate", "/v1/secrets/:id/value", {
      params,
      payload: RotateSecretBody,
      success: Secret,
      error: [InvalidRequest, NotFound, SecretManagerNotAllowed, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "Replaces the value (`rotatedAt` set); the proxies use the new one from their next request."
    })),
    HttpApiEndpoint.patch("update", "/v1/secrets/:id", {
      params,
      payload: PatchSecretBody,
      success: Secret,
      error: [InvalidRequest, NotFound, InsufficientScope, SecretManagerNotAllowed, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "Changes the fields present. Changing `allowed_hosts` or `header_name` needs `secrets:use` " +
        "besides `secrets:write` (403 `insufficient_scope` otherwise)."
    })),
    HttpApiEndpoint.delete("delete", "/v1/secrets/:id", {
      params,
      success: Secret,
      error: [NotFound, SecretManagerNotAllowed, Unavailable]
    }).annotateMerge(OpenApi.annotations({
      description: "Deletes the secret (200 with its metadata); the sandboxes it was bound to stop getting it " +
        "from their next request and no longer list it."
    }))
  )
  .annotateMerge(Access.resource("secrets"))
  .annotateMerge(OpenApi.annotations({ title: "Secrets" }))
{}
