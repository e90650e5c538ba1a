#!/usr/bin/env node
/**
 * `svc`, the installable one (`npm run cli:pack`): the user's commands only, a client of the
 * /v1 API at SVC_API_URL with SVC_API_KEY. The operator's commands stay in the repository's
 * `svc` (`../main.ts`).
 */
import { NO_OPERATOR_COMMANDS, run, tree } from "../Cli.ts"

run(tree(NO_OPERATOR_COMMANDS))
