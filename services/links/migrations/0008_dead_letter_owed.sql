ALTER TABLE "deliveries" ADD COLUMN "dead_letter" text;--> statement-breakpoint
-- Settled events are owed nothing: keep them out of the new index.
UPDATE "deliveries" SET "reconcile_at" = NULL WHERE "status" <> 'pending';--> statement-breakpoint
CREATE INDEX "deliveries_owed_idx" ON "deliveries" USING btree ("reconcile_at") WHERE reconcile_at IS NOT NULL;--> statement-breakpoint
DROP INDEX "deliveries_reconcile_idx";
