import { type DestinationStream, pino, type Logger } from "pino";
import { traceFields } from "./trace-context.js";

export type { Logger };

/** JSON lines; a line written while a request is being served carries its requestId and traceId. */
export function createLogger(name: string, level: string, destination?: DestinationStream): Logger {
  return pino({ name, level, mixin: () => traceFields() }, destination);
}
