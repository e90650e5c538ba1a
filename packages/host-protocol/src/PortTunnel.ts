/**
 * The preview tunnel of the data plane (declared here for both ends: the API's in
 * packages/sandboxes/src/Previews/Tunnel.ts, the agent's in packages/host/src/PortTunnel.ts):
 *
 *   GET {endpoint}/sandboxes/{id}/ports/{port}/tunnel
 *   Connection: Upgrade, Upgrade: svc-tunnel, Authorization: Bearer <host token>
 *   → 101 once the agent is connected to that exposed port: then raw bytes both ways;
 *   → or an `AgentError` body: 400 `invalid` (a port the sandbox does not expose), 401, 404,
 *     409 `not_running`, 502 `failed` (nothing answers on the port), 500.
 */
export const TUNNEL_PROTOCOL = "svc-tunnel"

export const tunnelPath = (sandboxId: string, port: number) =>
  `/sandboxes/${encodeURIComponent(sandboxId)}/ports/${port}/tunnel`

/** The agent's route of it: the sandbox id (percent-encoded) and the port. */
export const TUNNEL_ROUTE = /^\/sandboxes\/([^/]+)\/ports\/(\d{1,5})\/tunnel$/
