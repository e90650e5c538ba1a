#!/usr/bin/env node
/**
 * `svc`, the repository's: the user's commands (`Cli.ts`, the whole of the installable `svc`)
 * and the operator's (`Commands/Operator.ts`: the one-process dev stack, the roles, `org
 * create`, `key create`), which load the server only when one of them runs.
 */
import { run, tree } from "./Cli.ts"
import { operatorCommands } from "./Commands/Operator.ts"

run(tree(operatorCommands))
