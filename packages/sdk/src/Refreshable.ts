/**
 * What the SDK's objects of the API have in common (a sandbox, a background process, a code
 * context): the record of the last answer about it, and `refresh()` to ask again.
 */
export abstract class Refreshable<R extends { readonly state: string }> {
  #record: R

  constructor(record: R) {
    this.#record = record
  }

  /** As of the last answer: `refresh()` asks again. */
  get state(): R["state"] {
    return this.#record.state
  }
  /** The whole record, as of the last answer. */
  get record(): R {
    return this.#record
  }
  toJSON(): R {
    return this.#record
  }

  /** Reads the record again. */
  async refresh(): Promise<this> {
    return this.update(await this.reread())
  }

  /** The record as the API has it now. */
  protected abstract reread(): Promise<R>

  /** Takes `record` as the last answer (an action answered with it). */
  protected update(record: R): this {
    this.#record = record
    return this
  }
}
