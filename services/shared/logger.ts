import { type DestinationStream, pino, type Logger } from "pino";
import { traceFields } from "./trace-context.js";

export type { Logger };

/** JSON lines; a line written while a request is being served carries its requestId and traceId. */
export function createLogger(name: string, level: string, destination?: DestinationStream): Logger {
  return pino(
    { name, level, mixin: () => traceFields(), serializers: { err: (err: unknown) => pino.stdSerializers.err(withoutQueryValues(err) as Error) } },
    destination,
  );
}

// A failed query's values are a link's api_key and webhook, a key's hash:
// Drizzle writes them into its error's message and `params`, postgres.js
// keeps them in `parameters` and `args`, and PostgreSQL's `detail` can show
// the row ("Failing row contains (...)").
const QUERY_VALUES = new Set(["params", "parameters", "args", "detail"]);

/** The error chain, each error that held a failed query's values copied without them; the rest as they were. */
export function withoutQueryValues(err: unknown, depth = 0): unknown {
  if (!(err instanceof Error) || depth > 5) return err;
  const cause = withoutQueryValues(err.cause, depth + 1);
  if (!Object.keys(err).some((key) => QUERY_VALUES.has(key)) && cause === err.cause) return err;
  const query = (err as { query?: unknown }).query;
  // Drizzle's message is `Failed query: ${query}\nparams: ${params}`.
  const message = "params" in err && typeof query === "string" ? `Failed query: ${query}` : err.message;
  const copy: Error = Object.create(Object.getPrototypeOf(err));
  for (const [key, value] of Object.entries(err)) if (!QUERY_VALUES.has(key)) Object.assign(copy, { [key]: value });
  const stack = err.stack ?? "";
  const at = stack.indexOf(err.message);
  Object.defineProperties(copy, {
    message: { value: message, enumerable: false },
    stack: { value: `${err.name}: ${message}${at >= 0 ? stack.slice(at + err.message.length) : ""}`, enumerable: false },
    cause: { value: cause, enumerable: false },
  });
  return copy;
}
