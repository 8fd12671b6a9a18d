CREATE TYPE "public"."link_status" AS ENUM('created', 'used', 'expired');--> statement-breakpoint
CREATE TABLE "idempotency_keys" (
	"client_id" text NOT NULL,
	"key" text NOT NULL,
	"request_hash" text NOT NULL,
	"response" "bytea",
	"created_at" timestamp (3) with time zone NOT NULL,
	CONSTRAINT "idempotency_keys_client_id_key_pk" PRIMARY KEY("client_id","key")
);
--> statement-breakpoint
CREATE TABLE "links" (
	"id" text PRIMARY KEY NOT NULL,
	"client_id" text NOT NULL,
	"status" "link_status" DEFAULT 'created' NOT NULL,
	"data" jsonb NOT NULL,
	"metadata" jsonb NOT NULL,
	"expires_at" timestamp (3) with time zone NOT NULL,
	"created_at" timestamp (3) with time zone NOT NULL,
	"updated_at" timestamp (3) with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "outbox" (
	"id" uuid PRIMARY KEY NOT NULL,
	"subject" text NOT NULL,
	"payload" "bytea" NOT NULL,
	"created_at" timestamp (3) with time zone NOT NULL,
	"published_at" timestamp (3) with time zone
);
--> statement-breakpoint
CREATE TABLE "payments" (
	"id" text PRIMARY KEY NOT NULL,
	"link_id" text NOT NULL,
	"transaction_id" text NOT NULL,
	"amount_value" bigint NOT NULL,
	"currency" char(3) NOT NULL,
	"method" text NOT NULL,
	"card_brand" text,
	"card_last4" char(4),
	"created_at" timestamp (3) with time zone NOT NULL,
	CONSTRAINT "payments_link_id_key" UNIQUE("link_id")
);
--> statement-breakpoint
ALTER TABLE "payments" ADD CONSTRAINT "payments_link_id_links_id_fk" FOREIGN KEY ("link_id") REFERENCES "public"."links"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "idempotency_keys_created_at_idx" ON "idempotency_keys" USING btree ("created_at");--> statement-breakpoint
CREATE INDEX "links_client_id_id_idx" ON "links" USING btree ("client_id","id" DESC NULLS LAST);--> statement-breakpoint
CREATE INDEX "links_created_expires_at_idx" ON "links" USING btree ("expires_at") WHERE status = 'created';--> statement-breakpoint
CREATE INDEX "outbox_unpublished_idx" ON "outbox" USING btree ("created_at") WHERE published_at IS NULL;--> statement-breakpoint
CREATE INDEX "outbox_published_at_idx" ON "outbox" USING btree ("published_at") WHERE published_at IS NOT NULL;