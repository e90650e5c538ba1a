/**
 * The identity-and-access services as one layer.
 * - `layer`: for API processes; needs `SqlClient` and `Nats`; settings from the environment.
 * - `layerWith(settings)`: the same with settings given (tests, benches).
 * - `operatorLayer`: for the `svc` operator commands (mint keys, create orgs); needs `SqlClient`
 *   only (no verification cache to keep coherent, so no bus), and reads no setting: none of them
 *   bears on minting (the API's sessions, caches and rate limits are the API's).
 */
import { Layer } from "effect"
import { ApiKeys } from "./ApiKeys.ts"
import { Audit } from "./Audit.ts"
import { CredentialCache } from "./Auth/CredentialCache.ts"
import { LastUsed } from "./Auth/LastUsed.ts"
import { AuthConfig, type AuthSettings } from "./Config.ts"
import { Orgs } from "./Orgs.ts"
import { RateLimiter } from "./RateLimit.ts"
import { Sessions } from "./Sessions.ts"
import { Users } from "./Users.ts"

const services = Layer.mergeAll(ApiKeys.layer, Orgs.layer, Sessions.layer, Users.layer, RateLimiter.layer).pipe(
  Layer.provideMerge(Layer.mergeAll(LastUsed.layer, Audit.layer))
)

export const layerWith = (settings: Partial<AuthSettings>) =>
  services.pipe(Layer.provideMerge(CredentialCache.layer), Layer.provideMerge(AuthConfig.layerWith(settings)))

export const layer = services.pipe(Layer.provideMerge(CredentialCache.layer), Layer.provideMerge(AuthConfig.layer))

export const operatorLayer = services.pipe(
  Layer.provideMerge(CredentialCache.layerNoCache),
  Layer.provideMerge(AuthConfig.layerWith({}))
)
