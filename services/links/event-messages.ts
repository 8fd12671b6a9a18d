// The events the LinkService announces: how each is built, with the ids of
// the request that caused it, and the NATS subject and headers it travels
// under. The outbox (outbox.ts) stores them; the relay publishes them.
import { randomUUID } from "node:crypto";
import { create, fromBinary, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { type Event, EventSchema } from "../../proto/gen/paylink/v1/events_pb.js";
import { currentTrace, traceHeaders } from "../shared/trace-context.js";

export const SUBJECT_PREFIX = "paylink.events";
export const SUBJECTS = {
  paymentCompleted: `${SUBJECT_PREFIX}.payment.completed`,
  linkExpired: `${SUBJECT_PREFIX}.link.expired`,
} as const;

type Payload = NonNullable<Event["payload"]["case"]>;

export function newEvent(
  at: Date,
  fields: Pick<MessageInitShape<typeof EventSchema>, "linkId" | "clientId" | "payload">,
): Event {
  return create(EventSchema, { ...fields, id: randomUUID(), occurredAt: timestampFromDate(at), ...requestTrace() });
}

/** The ids of the request being served, if any, which travel with an event it writes. */
export function requestTrace(): Pick<Event, "requestId" | "traceparent" | "tracestate"> {
  const trace = traceHeaders(currentTrace());
  return { requestId: trace["x-request-id"] ?? "", traceparent: trace.traceparent ?? "", tracestate: trace.tracestate ?? "" };
}

/** Announces that a link became expired, by time or by its merchant. */
export function linkExpiredEvent(at: Date, link: { id: string; clientId: string; expiresAt: Date }): Event {
  return newEvent(at, {
    linkId: link.id,
    clientId: link.clientId,
    payload: { case: "linkExpired", value: { expiredAt: timestampFromDate(link.expiresAt) } },
  });
}

export function subjectOf(event: Event): string {
  return SUBJECTS[event.payload.case as Payload];
}

/** The NATS headers of an outbox row: its request's X-Request-Id, traceparent and tracestate, when it has them. */
export function traceHeadersOf(payload: Uint8Array): Record<string, string> {
  const event = fromBinary(EventSchema, payload);
  const headers: Record<string, string> = {};
  if (event.requestId) headers["X-Request-Id"] = event.requestId;
  if (event.traceparent) headers.traceparent = event.traceparent;
  if (event.tracestate) headers.tracestate = event.tracestate;
  return headers;
}
