/**
 * A driver refusal in words: for the tenant (the sandbox's `errorMessage`) and for this host's
 * log.
 */
import type { SandboxDriverError } from "@svc/host/Driver"

const MAX_ERROR_MESSAGE = 1000

/**
 * A driver refusal in the words a tenant may read, for the sandbox's `errorMessage`: which
 * step failed, never the driver's own message (it can hold host paths, a bubblewrap log tail,
 * the host's subnet). `describeDriverError` is the full story, for this host's log.
 */
export const tenantMessage = (error: SandboxDriverError): string => {
  switch (error._tag) {
    case "InvalidSandboxRequest":
      return "the host refused the sandbox's parameters"
    case "SandboxNotFound":
      return "no such sandbox on this host"
    case "SandboxAlreadyExists":
      return "the sandbox exists already"
    case "SandboxNotRunning":
      return "the sandbox is not running"
    case "TemplateNotFound":
      return `template ${error.template} is not available on this host`
    case "SandboxCapacityExhausted":
      return "the host is out of capacity"
    case "SandboxFileError":
      return `a file operation failed (${error.reason.replaceAll("_", " ")})`
    case "ProcessRefused":
      return `a background process was refused (${error.reason.replaceAll("_", " ")})`
    case "DriverUnsupported":
      return `${error.operation} is not supported on this host`
    case "DriverFailure":
      return `${error.operation} failed on the host`
  }
}

/** A driver refusal in words, with the driver's details: for the host's log only. */
export const describeDriverError = (error: SandboxDriverError): string => {
  const text = (() => {
    switch (error._tag) {
      case "InvalidSandboxRequest":
        return `invalid request: ${error.message}`
      case "SandboxCapacityExhausted":
        return `host out of capacity: ${error.message}`
      case "SandboxFileError":
        return `${error.path}: ${error.message}`
      case "DriverUnsupported":
      case "DriverFailure":
        return `${error.operation} failed: ${error.message}`
      default:
        // Nothing more to tell the host's log than the tenant.
        return tenantMessage(error)
    }
  })()
  return text.length > MAX_ERROR_MESSAGE ? text.slice(0, MAX_ERROR_MESSAGE - 1) + "…" : text
}
