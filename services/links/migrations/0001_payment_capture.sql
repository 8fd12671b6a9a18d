-- Existing rows get an empty authorization id: the payments made before this
-- migration were captured at once, so nothing will ever capture them again.
ALTER TABLE "payments" ADD COLUMN "authorization_id" text NOT NULL DEFAULT '';--> statement-breakpoint
ALTER TABLE "payments" ALTER COLUMN "authorization_id" DROP DEFAULT;--> statement-breakpoint
ALTER TABLE "payments" ADD COLUMN "captured_at" timestamp (3) with time zone;--> statement-breakpoint
UPDATE "payments" SET "captured_at" = "created_at";--> statement-breakpoint
CREATE INDEX "payments_uncaptured_idx" ON "payments" USING btree ("created_at") WHERE captured_at IS NULL;
