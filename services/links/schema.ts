import { sql } from "drizzle-orm";
import {
  bigint,
  boolean,
  char,
  customType,
  index,
  integer,
  jsonb,
  pgEnum,
  pgTable,
  primaryKey,
  text,
  timestamp,
  uniqueIndex,
  uuid,
} from "drizzle-orm/pg-core";

const bytea = customType<{ data: Uint8Array; driverData: Uint8Array }>({
  dataType: () => "bytea",
});

const at = (name: string) => timestamp(name, { withTimezone: true, precision: 3, mode: "date" });

export const linkStatus = pgEnum("link_status", ["created", "used", "expired"]);
export type LinkStatusValue = (typeof linkStatus.enumValues)[number];

export const links = pgTable(
  "links",
  {
    // "lnk-" + UUIDv7: time-ordered, so new rows land at the right edge of the index.
    id: text("id").primaryKey(),
    clientId: text("client_id").notNull(),
    status: linkStatus("status").notNull().default("created"),
    /** LinkData in protobuf JSON form (snake_case names, int64 as strings). */
    data: jsonb("data").$type<Record<string, unknown>>().notNull(),
    metadata: jsonb("metadata").$type<Record<string, string>>().notNull(),
    expiresAt: at("expires_at").notNull(),
    createdAt: at("created_at").notNull(),
    updatedAt: at("updated_at").notNull(),
  },
  (t) => [
    // Get checks ownership after the primary-key lookup; list walks this index newest first.
    index("links_client_id_id_idx").on(t.clientId, t.id.desc()),
    // The expiry sweeper reads only live links, so its cost follows the links that are due.
    index("links_created_expires_at_idx").on(t.expiresAt).where(sql`status = 'created'`),
  ],
);

export const payments = pgTable(
  "payments",
  {
    id: text("id").primaryKey(),
    // The database, not only the code, holds a link to one payment.
    linkId: text("link_id")
      .notNull()
      .unique("payments_link_id_key")
      .references(() => links.id),
    transactionId: text("transaction_id").notNull(),
    /** The processor's hold; captured once the link is ours, retried until it is. */
    authorizationId: text("authorization_id").notNull(),
    capturedAt: at("captured_at"),
    /** Failed captures by the capture job, and when it may try again (none yet: after its grace period). */
    captureAttempts: integer("capture_attempts").notNull().default(0),
    captureRetryAt: at("capture_retry_at"),
    amountValue: bigint("amount_value", { mode: "bigint" }).notNull(),
    currency: char("currency", { length: 3 }).notNull(),
    method: text("method", { enum: ["card", "bank_transfer"] }).notNull(),
    // Never the card number or CVC: only what a receipt may show.
    cardBrand: text("card_brand"),
    cardLast4: char("card_last4", { length: 4 }),
    createdAt: at("created_at").notNull(),
  },
  (t) => [index("payments_uncaptured_idx").on(t.createdAt).where(sql`captured_at IS NULL`)],
);

export const outbox = pgTable(
  "outbox",
  {
    id: uuid("id").primaryKey(),
    subject: text("subject").notNull(),
    /** A paylink.v1.Event in protobuf binary form. */
    payload: bytea("payload").notNull(),
    createdAt: at("created_at").notNull(),
    publishedAt: at("published_at"),
    /**
     * Written by a release whose events carry ids only. Rows of earlier
     * releases default to false: their payment events may hold the webhook
     * address and api_key, and are adopted (and stripped) at start.
     */
    idsOnly: boolean("ids_only").notNull().default(false),
  },
  (t) => [
    index("outbox_unpublished_idx").on(t.createdAt).where(sql`published_at IS NULL`),
    index("outbox_published_at_idx").on(t.publishedAt).where(sql`published_at IS NOT NULL`),
    // Rows of earlier releases still to adopt: empty once a deployment has moved on.
    index("outbox_legacy_idx").on(t.createdAt).where(sql`ids_only = false`),
  ],
);

export const idempotencyKeys = pgTable(
  "idempotency_keys",
  {
    clientId: text("client_id").notNull(),
    key: text("key").notNull(),
    requestHash: text("request_hash").notNull(),
    /** The CreateLinkResponse in protobuf binary form; null while the first request runs. */
    response: bytea("response"),
    createdAt: at("created_at").notNull(),
  },
  (t) => [primaryKey({ columns: [t.clientId, t.key] }), index("idempotency_keys_created_at_idx").on(t.createdAt)],
);

export const deliveryStatus = pgEnum("delivery_status", ["pending", "delivered", "failed", "gone", "no_webhook"]);
export type DeliveryStatusValue = (typeof deliveryStatus.enumValues)[number];

/**
 * One row per payment.completed event: the delivery log's source of truth.
 * The broker may lose a message; this row says what is still owed.
 */
export const deliveries = pgTable(
  "deliveries",
  {
    /** The event id, which is the Webhook-Id. */
    eventId: uuid("event_id").primaryKey(),
    linkId: text("link_id")
      .notNull()
      .references(() => links.id),
    clientId: text("client_id").notNull(),
    paymentId: text("payment_id").notNull(),
    transactionId: text("transaction_id").notNull(),
    status: deliveryStatus("status").notNull(),
    /** Bumped by each redelivery; copies of an older schedule are dropped. */
    generation: integer("generation").notNull().default(0),
    /** Leases handed out in this generation; the place in the retry schedule is the attempts logged (deliveries.ts). */
    started: integer("started").notNull().default(0),
    /** While pending: when the next attempt is due. */
    nextAttemptAt: at("next_attempt_at"),
    /** An attempt under way holds the lease; no other copy is delivered meanwhile. */
    leaseToken: uuid("lease_token"),
    leaseUntil: at("lease_until"),
    /** While pending: when to publish the event again if nothing has happened. */
    reconcileAt: at("reconcile_at"),
    /** How many times reconciliation re-published it in this generation (spaces the next). */
    republished: integer("republished").notNull().default(0),
    /**
     * While failed: the Paylink-Last-Error of its dead letter, until the
     * notifier confirms the dead letter is published (null after, and for
     * events that failed before this column).
     */
    deadLetter: text("dead_letter"),
    createdAt: at("created_at").notNull(),
  },
  (t) => [
    index("deliveries_link_id_idx").on(t.linkId, t.createdAt),
    // Reconciliation reads only what is owed: a webhook, or a dead letter.
    // reconcile_at is null once an event is settled and its dead letter sent.
    index("deliveries_owed_idx").on(t.reconcileAt).where(sql`reconcile_at IS NOT NULL`),
  ],
);

/**
 * Authorizations asked of the processor whose payment has not committed: a
 * row is written before the processor is called and deleted in the payment's
 * own transaction, or once the hold is voided. A row that outlives its pay
 * (a crash, a lost COMMIT, a void that failed) is released by the capture
 * job, so no hold is ever left to lapse on the customer's card.
 */
export const openHolds = pgTable(
  "open_holds",
  {
    /** The processor's idempotency key for the authorization: "hold-" + UUIDv7. */
    reference: text("reference").primaryKey(),
    linkId: text("link_id")
      .notNull()
      .references(() => links.id),
    createdAt: at("created_at").notNull(),
    /** When the capture job may release it: well after any pay could still commit, later after a failed release. */
    releaseAt: at("release_at").notNull(),
    /**
     * Set, and committed, before the capture job asks the processor to
     * release it: from then on no payment can commit with this hold,
     * whatever the processor answers.
     */
    releasing: boolean("releasing").notNull().default(false),
  },
  (t) => [index("open_holds_release_at_idx").on(t.releaseAt)],
);

export const deliveryAttempts = pgTable(
  "delivery_attempts",
  {
    eventId: uuid("event_id")
      .notNull()
      .references(() => deliveries.eventId),
    /** 1, 2, ... over the event's life, redeliveries included. */
    number: integer("number").notNull(),
    generation: integer("generation").notNull(),
    at: at("at").notNull(),
    statusCode: integer("status_code"),
    error: text("error"),
    durationMs: integer("duration_ms").notNull(),
    /**
     * The lease the attempt ran under (StartAttempt's, one per attempt): a
     * notifier that records again after losing the answer finds it taken.
     * Null for attempts recorded without one.
     */
    leaseToken: text("lease_token"),
  },
  (t) => [
    primaryKey({ columns: [t.eventId, t.number] }),
    uniqueIndex("delivery_attempts_lease_token_idx").on(t.eventId, t.leaseToken),
  ],
);

export const apiKeys = pgTable(
  "api_keys",
  {
    // "key-" + UUIDv7.
    id: text("id").primaryKey(),
    clientId: text("client_id").notNull(),
    /** SHA-256 of the secret: the secret itself is shown once and never stored. */
    secretHash: bytea("secret_hash").notNull().unique("api_keys_secret_hash_key"),
    last4: char("last4", { length: 4 }).notNull(),
    createdAt: at("created_at").notNull(),
    /** To the minute, written at most once a minute. */
    lastUsedAt: at("last_used_at"),
    revokedAt: at("revoked_at"),
  },
  (t) => [index("api_keys_client_id_idx").on(t.clientId, t.id)],
);

/**
 * Payment attempts that count against a link: each from its start until it
 * ends without a card's refusal, and those that failed (declined, invalid
 * card) for good. Five within an hour lock a link's pay.
 */
export const paymentFailures = pgTable(
  "payment_failures",
  {
    linkId: text("link_id")
      .notNull()
      .references(() => links.id),
    failedAt: at("failed_at").notNull(),
    /** The attempt's own id while it runs, so that it can be taken back; null for rows of older copies. */
    attemptId: text("attempt_id"),
  },
  (t) => [index("payment_failures_link_id_failed_at_idx").on(t.linkId, t.failedAt)],
);
