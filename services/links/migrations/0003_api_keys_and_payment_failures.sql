CREATE TABLE "api_keys" (
	"id" text PRIMARY KEY NOT NULL,
	"client_id" text NOT NULL,
	"secret_hash" "bytea" NOT NULL,
	"last4" char(4) NOT NULL,
	"created_at" timestamp (3) with time zone NOT NULL,
	"last_used_at" timestamp (3) with time zone,
	"revoked_at" timestamp (3) with time zone,
	CONSTRAINT "api_keys_secret_hash_key" UNIQUE("secret_hash")
);
--> statement-breakpoint
CREATE TABLE "payment_failures" (
	"link_id" text NOT NULL,
	"failed_at" timestamp (3) with time zone NOT NULL
);
--> statement-breakpoint
ALTER TABLE "payment_failures" ADD CONSTRAINT "payment_failures_link_id_links_id_fk" FOREIGN KEY ("link_id") REFERENCES "public"."links"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "api_keys_client_id_idx" ON "api_keys" USING btree ("client_id","id");--> statement-breakpoint
CREATE INDEX "payment_failures_link_id_failed_at_idx" ON "payment_failures" USING btree ("link_id","failed_at");