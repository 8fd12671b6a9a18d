CREATE TYPE "public"."delivery_status" AS ENUM('pending', 'delivered', 'failed', 'gone', 'no_webhook');--> statement-breakpoint
CREATE TABLE "deliveries" (
	"event_id" uuid PRIMARY KEY NOT NULL,
	"link_id" text NOT NULL,
	"client_id" text NOT NULL,
	"payment_id" text NOT NULL,
	"transaction_id" text NOT NULL,
	"status" "delivery_status" NOT NULL,
	"generation" integer DEFAULT 0 NOT NULL,
	"started" integer DEFAULT 0 NOT NULL,
	"next_attempt_at" timestamp (3) with time zone,
	"lease_token" uuid,
	"lease_until" timestamp (3) with time zone,
	"reconcile_at" timestamp (3) with time zone,
	"republished" integer DEFAULT 0 NOT NULL,
	"created_at" timestamp (3) with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "delivery_attempts" (
	"event_id" uuid NOT NULL,
	"number" integer NOT NULL,
	"generation" integer NOT NULL,
	"at" timestamp (3) with time zone NOT NULL,
	"status_code" integer,
	"error" text,
	"duration_ms" integer NOT NULL,
	CONSTRAINT "delivery_attempts_event_id_number_pk" PRIMARY KEY("event_id","number")
);
--> statement-breakpoint
ALTER TABLE "outbox" ADD COLUMN "ids_only" boolean DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE "deliveries" ADD CONSTRAINT "deliveries_link_id_links_id_fk" FOREIGN KEY ("link_id") REFERENCES "public"."links"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "delivery_attempts" ADD CONSTRAINT "delivery_attempts_event_id_deliveries_event_id_fk" FOREIGN KEY ("event_id") REFERENCES "public"."deliveries"("event_id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "deliveries_link_id_idx" ON "deliveries" USING btree ("link_id","created_at");--> statement-breakpoint
CREATE INDEX "deliveries_reconcile_idx" ON "deliveries" USING btree ("reconcile_at") WHERE status = 'pending';--> statement-breakpoint
CREATE INDEX "outbox_legacy_idx" ON "outbox" USING btree ("created_at") WHERE ids_only = false;